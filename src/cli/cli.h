/*
 * cli.h - the `rapid` command's subcommands. Each takes the arguments after its
 * name (argv[0] is the subcommand) and returns the process exit status:
 * 0 success, 1 failure (a message was printed), 2 bad usage (usage was printed).
 */
#ifndef RP_CLI_H
#define RP_CLI_H

int rp_cli_run(int argc, char **argv);
int rp_cli_serve(int argc, char **argv);
int rp_cli_tokenize(int argc, char **argv);
int rp_cli_template(int argc, char **argv);

// The bundled default model's folder (models/rapid-tiny), or NULL when it cannot be found.
const char *rp_cli_default_model(void);

#endif
