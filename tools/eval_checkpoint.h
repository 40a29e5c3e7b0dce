/* flexpoint-train --eval: a checkpoint trained in any format, evaluated in each of --formats. */
#ifndef FX_TOOLS_EVAL_CHECKPOINT_H
#define FX_TOOLS_EVAL_CHECKPOINT_H

#include "cli_options.h"
#include "flexpoint_data.h"
#include "flexpoint_model.h"

#include <stdio.h>

/* Evaluate o->eval on test in every run of o (the training set gives the normalisation and
 * must be the one the checkpoint was trained on). def: the definition read from --model FILE,
 * or NULL for a built-in name. Prints the accuracy table and writes the header and one row
 * per format to csv (eval.csv; the caller opens and closes it). Returns 0, or 1 after a
 * message on stderr. */
int fx_cli_eval(const fx_cli_options *o, const fx_model_def *def, const fx_dataset *train,
                const fx_dataset *test, FILE *csv);

#endif
