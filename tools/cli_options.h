/* Command-line options of flexpoint-train: argv in, an options struct, a status and a message
 * out. A pure function (no exit, no output, no allocation that outlives the call), so that the
 * tool and the fuzzer (tests/fuzz/fuzz_cli.c) run the same code. What it cannot know without
 * the data or the trainer (the --trace names a model really has, a usable --device, writable
 * paths) the tool checks before training. */
#ifndef FX_TOOLS_CLI_OPTIONS_H
#define FX_TOOLS_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#define FX_CLI_MAX_RUNS 16
/* Bytes of a path option, NUL included. Longer paths are refused rather than cut; the room
 * left below Linux's PATH_MAX (4096) holds the file names the tool appends
 * ("/trace_<run>_<tensor>.csv" is at most 110 bytes). */
#define FX_CLI_PATH_MAX 3840
#define FX_CLI_MAX_TRACES 16
/* Bytes of a trainer tensor name, NUL included (the trainer's registry holds char[64]). */
#define FX_CLI_NAME_MAX 64
/* A message buffer of this size holds every message in full. */
#define FX_CLI_MSG_MAX 512

typedef struct fx_cli_run {
    char label[40];   /* "fp32", "flex16_5", "flex16_5:published", ...: unique among the runs */
    int fmt;          /* fmt_t */
    char autoflex[16]; /* Autoflex preset (used by flex16_5 runs only) */
} fx_cli_run;

typedef struct fx_cli_options {
    char model[16];                    /* "mlp", "cnn" or "resnet20" */
    char data[16];                     /* "fashion-mnist", "cifar10", "synthetic", or for
                                          text "fortunes" or "text" (--data text:PATH) */
    char data_dir[FX_CLI_PATH_MAX];    /* "": the data set's default location */
    char text[FX_CLI_PATH_MAX];        /* text data: the file or folder read (fortunes:
                                          --data-dir or FX_DATA_FORTUNES_DIR); "" otherwise */
    char out[FX_CLI_PATH_MAX];         /* never empty */
    char ckpt_dir[FX_CLI_PATH_MAX];    /* "": no checkpoints */
    char eval[FX_CLI_PATH_MAX];        /* "": train; else evaluate this checkpoint or weights
                                          file in --formats (no training option given but
                                          --model, which a weights file needs) */
    int model_given;                   /* --model was given */
    char model_file[FX_CLI_PATH_MAX];  /* --model FILE: a model file (then model holds a label
                                          made from its name); "": a built-in name */
    int export_weights;                /* 0 or 1: weights_<run>.fxw in out after training */
    int profile;                       /* 0 or 1: time phases and layers, profile_<run>.csv */
    char policy[128];                  /* format policy on top of each run's format ("": none) */
    char policy_file[FX_CLI_PATH_MAX]; /* --policy-file: read into policy by the tool */
    int optimizer;                     /* FX_OPT_* */
    double adam_beta1, adam_beta2;     /* [0, 1) */
    double adam_eps;                   /* finite, > 0 */
    double clip_norm;                  /* finite, >= 0 (0: off) */
    double ls_init;                    /* (0, FLT_MAX] */
    double ls_growth;                  /* finite, > 1 */
    double ls_backoff;                 /* (0, 1) */
    int64_t ls_interval;               /* 1..2^40 */
    double ls_min;                     /* [0, ls_init] */
    char traces[FX_CLI_MAX_TRACES][FX_CLI_NAME_MAX]; /* distinct, non-empty */
    int ntraces;                       /* 1..FX_CLI_MAX_TRACES */
    int traces_given;                  /* --trace named them (else the model's defaults) */
    fx_cli_run runs[FX_CLI_MAX_RUNS];
    int nruns;                         /* 1..FX_CLI_MAX_RUNS */
    int epochs;                        /* 1..100000 */
    int batch;                         /* 1..65536 */
    int master;                        /* 0 or 1 */
    int loss_scaling;                  /* -1 auto, 0 off, 1 dynamic, 2 static */
    int stochastic;                    /* 0 or 1 */
    int schedule;                      /* FX_LR_* */
    int augment;                       /* 0 or 1 */
    int pad;                           /* 0..64 */
    int threads;                       /* 0 (library default) or 1..1024 */
    int resume;                        /* 0 or 1; 1 only with a ckpt_dir */
    int device;                        /* -1 the host, else a CUDA ordinal 0..1023 */
    int quiet;                         /* 0 or 1 */
    int distributed;                   /* 0 or 1: one rank of an MPI job (--distributed) */
    double lr;                         /* finite, >= 1e-12 */
    double momentum;                   /* [0, 1) */
    double wd;                         /* finite, >= 0 */
    int64_t train_subset, test_subset; /* 0 (all) or 1..2^40 */
    int64_t eval_every;                /* 0 (at epochs' ends only) or 1..2^40 steps */
    int64_t synthetic_n;               /* 10..2^30 */
    uint64_t seed;                     /* 0..2^31-1 */
} fx_cli_options;

enum {
    FX_CLI_OK = 0,   /* *o holds a complete, checked set of options */
    FX_CLI_HELP = 1, /* --help or -h: print fx_cli_usage() and stop */
    FX_CLI_USAGE = 2 /* a usage error, described in msg (the tool's exit status) */
};

/* Parse argv[1..argc-1] (argv[0] is the program's name) into *o, which is fully overwritten.
 * On FX_CLI_USAGE, msg receives a one-line description naming the option and the value
 * (truncated to msg_size; FX_CLI_MSG_MAX holds any); msg is "" otherwise. argv[i] must be
 * non-NULL for i < argc. */
int fx_cli_parse(int argc, char *const argv[], fx_cli_options *o, char *msg, size_t msg_size);

/* The --help text. */
const char *fx_cli_usage(void);

#endif
