/* tools.h — entry points of the subcommands (each a thin front over the engine API). */
#ifndef OB_TOOLS_H
#define OB_TOOLS_H

int ob_cmd_convert(int argc, char **argv);
int ob_cmd_run(int argc, char **argv);
int ob_cmd_bench(int argc, char **argv);
int ob_cmd_registry(int argc, char **argv);

#endif
