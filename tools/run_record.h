/* run.json of a flexpoint-train result folder (tools/run_record.c). */
#ifndef FX_TOOLS_RUN_RECORD_H
#define FX_TOOLS_RUN_RECORD_H

#include "cli_options.h"
#include "flexpoint_data.h"

#include <stdio.h>

/* Write the run's description as JSON to f: flexpoint version, start time (UTC), the command
 * line, the machine (CPU model, backend, threads, device, and the ranks of a --distributed
 * job: 1 without), model, data (sources, sizes, pad), the recipe, and each run's label, format
 * and Autoflex preset. The caller checks f for errors. */
void fx_run_record_write(FILE *f, const fx_cli_options *o, int argc, char *const argv[],
                         const fx_dataset *train, const fx_dataset *test, int ranks);

#endif
