/* sampler.h — turning logits into the next token (declarations live in onebit.h).
 *
 * Owns: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
 * penalties over the recent tokens, and a seeded RNG (same seed and inputs, same output).
 * Scratch is sized at creation: sampling does not allocate.
 * Does not own: grammar constraints (a later module masks logits before this).
 */
#ifndef OB_SAMPLER_H
#define OB_SAMPLER_H

#include "onebit.h"

#endif
