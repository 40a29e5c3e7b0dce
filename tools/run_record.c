/* run.json: what a result folder of flexpoint-train was made from, so that a folder describes
 * itself. tools/merge_results.py reads it to build one comparison table from any set of
 * folders (the runs of a sweep, one format or seed per job). */
#define _POSIX_C_SOURCE 200809L
#include "run_record.h"

#include "flexpoint.h"
#include "flexpoint_train.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* The CPU's model name from /proc/cpuinfo ("" where there is none). */
static void cpu_model(char *buf, size_t n)
{
    buf[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        for (v++; *v == ' ' || *v == '\t'; v++) {}
        snprintf(buf, n, "%s", v);
        buf[strcspn(buf, "\n")] = '\0';
        break;
    }
    fclose(f);
}

static const char *const schedules[] = {"constant", "cosine", "step"};

void fx_run_record_write(FILE *f, const fx_cli_options *o, int argc, char *const argv[],
                         const fx_dataset *train, const fx_dataset *test, int ranks)
{
    char cpu[256], when[32];
    cpu_model(cpu, sizeof cpu);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(f, "{\n  \"flexpoint_version\": ");
    json_str(f, flexpoint_version());
    fprintf(f, ",\n  \"started_utc\": \"%s\",\n  \"argv\": [", when);
    for (int i = 0; i < argc; i++) {
        if (i) fputs(", ", f);
        json_str(f, argv[i]);
    }
    fprintf(f, "],\n  \"machine\": {\"cpu\": ");
    json_str(f, cpu);
    fprintf(f, ", \"backend\": ");
    json_str(f, flexpoint_backend());
    /* the kernel per op and format (bf16 GEMM routes differ in their bits): reproduce with
     * FLEXPOINT_CPU and FLEXPOINT_KERNEL_BF16_GEMM */
    fprintf(f, ", \"cpu_model\": ");
    json_str(f, flexpoint_cpu_model());
    fprintf(f, ", \"kernels\": {");
    for (int k = 0; k < FMT_COUNT; k++) {
        fprintf(f, "%s\"matmul/%s\": ", k ? ", " : "", fmt_name((fmt_t)k));
        json_str(f, flexpoint_kernel_name("matmul", (fmt_t)k));
    }
    fprintf(f, "}, \"kernel_report\": ");
    json_str(f, flexpoint_kernel_report());
    /* ranks: the processes of a --distributed job (1 without), which split each batch; the
     * float formats' bits depend on it */
    fprintf(f, ", \"threads\": %d, \"device\": %d, \"ranks\": %d},\n", flexpoint_num_threads(),
            o->device, ranks);
    fprintf(f, "  \"model\": ");
    json_str(f, o->model);
    if (o->model_file[0]) { /* --model FILE: the file the model was read from */
        fprintf(f, ", \"model_file\": ");
        json_str(f, o->model_file);
    }
    fprintf(f, ",\n  \"data\": {\"name\": ");
    json_str(f, o->data);
    if (o->text[0]) { /* text data: the corpus file or folder read */
        fprintf(f, ", \"text\": ");
        json_str(f, o->text);
    }
    fprintf(f, ", \"train_source\": ");
    json_str(f, fx_dataset_source(train));
    fprintf(f, ", \"test_source\": ");
    json_str(f, fx_dataset_source(test));
    fprintf(f, ", \"train_images\": %lld, \"test_images\": %lld, \"pad\": %d},\n",
            (long long)fx_dataset_len(train), (long long)fx_dataset_len(test), o->pad);
    fprintf(f, "  \"recipe\": {\"epochs\": %d, \"batch\": %d, \"lr\": %.17g, \"momentum\": %.17g, "
               "\"weight_decay\": %.17g, \"schedule\": \"%s\", \"master_weights\": %d, "
               "\"loss_scaling\": \"%s\", \"stochastic_rounding\": %d, \"augment\": %d, "
               "\"seed\": %llu, \"optimizer\": \"%s\", \"adam_betas\": [%.17g, %.17g], "
               "\"adam_eps\": %.17g, \"clip_norm\": %.17g, \"loss_scale_init\": %.17g, "
               "\"loss_scale_growth\": %.17g, \"loss_scale_backoff\": %.17g, "
               "\"loss_scale_interval\": %lld, \"loss_scale_min\": %.17g},\n",
            o->epochs, o->batch, o->lr, o->momentum, o->wd,
            o->schedule >= 0 && o->schedule < 3 ? schedules[o->schedule] : "?", o->master,
            o->loss_scaling < 0    ? "auto"
            : o->loss_scaling == 2 ? "static"
            : o->loss_scaling      ? "dynamic"
                                   : "off",
            o->stochastic, o->augment, (unsigned long long)o->seed,
            o->optimizer == FX_OPT_ADAM ? "adam" : o->optimizer == FX_OPT_ADAMW ? "adamw" : "sgd",
            o->adam_beta1, o->adam_beta2, o->adam_eps, o->clip_norm, o->ls_init, o->ls_growth,
            o->ls_backoff, (long long)o->ls_interval, o->ls_min);
    fprintf(f, "  \"policy\": ");
    json_str(f, o->policy);
    fprintf(f, ",\n  \"runs\": [");
    for (int r = 0; r < o->nruns; r++) {
        fprintf(f, "%s\n    {\"label\": ", r ? "," : "");
        json_str(f, o->runs[r].label);
        fprintf(f, ", \"format\": ");
        json_str(f, fmt_name((fmt_t)o->runs[r].fmt));
        fprintf(f, ", \"autoflex\": ");
        json_str(f, o->runs[r].fmt == FMT_FLEX16_5 ? o->runs[r].autoflex : "");
        fputc('}', f);
    }
    fprintf(f, "\n  ]\n}\n");
}
