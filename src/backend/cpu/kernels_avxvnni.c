/* kernels_avxvnni.c — the AVX-VNNI table: kernels_avx2.c compiled again with 256-bit vpdpbusd
 * (Makefile: -mavxvnni) in place of the vpmaddubsw sequences. See kernels_avx2.c. */
#define OB_AVXVNNI 1
#include "kernels_avx2.c"
