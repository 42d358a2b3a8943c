/*
 * A fake libnvidia-ml.so.1 for tests and benchmarks: the real nvidia-ml-py bindings (structs,
 * error classes) are served by this library instead of a GPU driver.
 *
 * State comes from a small text file named by $KVTOP_FAKE_NVML_STATE, re-read on every call, so
 * a test can change memory, processes and errors while the program under test runs. Lines:
 *
 *   driver 580.65.06
 *   init_error code=9                 nvmlInit* returns this NVML code
 *   gpu 0 name=NVIDIA H200 uuid=GPU-... bus=00000000:18:00.0 total_mib=97887 used_mib=90361
 *         reserved_mib=512 util=61 mem_util=30 temp=55 power_mw=400000 limit_mw=600000
 *         [free_mib=N: free as answered, instead of total - used - reserved]
 *         [throttle=0x40: the current clocks event (throttle) reasons bitmask, NVML's
 *          nvmlClocksEventReason* bits; 0 when omitted]
 *         Values are unsigned 32-bit (util, temp, power) or 64-bit (memory) as in NVML, so
 *         util=4294967295 is the 0xFFFFFFFF a broken driver hands back.
 *   proc 0 pid=1234 used_mib=90000    a compute process on GPU 0 (used_mib omitted: not available)
 *   error FUNCTION gpu=IDX code=15    FUNCTION returns code (gpu= omitted: for every GPU)
 *   absent FUNCTION                   FUNCTION returns NVML_ERROR_FUNCTION_NOT_FOUND (old driver)
 *   delay FUNCTION ms=3000            FUNCTION sleeps first (a hung driver call)
 *   # comment
 *
 * Values may contain spaces (a value runs until the next " key=" token). The device count is the
 * number of gpu lines; a handle for index I reads the gpu line numbered I, and returns
 * NVML_ERROR_GPU_IS_LOST once that line is gone. Memory: used_mib is NVML v2 "used" (reserved
 * excluded); v1 reports used + reserved; free = total - used - reserved in both.
 * With no state file set or readable, every call returns NVML_ERROR_DRIVER_NOT_LOADED.
 *
 * Functions that peers such as nvitop call but the state cannot answer are exported as stubs
 * returning NVML_ERROR_NOT_SUPPORTED (see the block at the end), like a driver on a card without
 * the feature; error/absent/delay lines apply to them as to every other function.
 */
#define _GNU_SOURCE
/* Long values are cut to the NVML buffer sizes on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define EXPORT __attribute__((visibility("default")))
#define MAX_GPUS 64
#define MAX_PROCS 512
#define MAX_RULES 64
#define MIB 1048576ULL

/* Struct layouts as nvidia-ml-py (pynvml.py) declares them. */
typedef struct nvmlDevice_st {
    unsigned int index;
} *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* v2 and v3 share this layout */

typedef struct {
    int present;
    char name[96], uuid[96], bus[32];
    unsigned long long total_mib, used_mib, reserved_mib;
    int has_free; /* free_mib= given: answered as is (a driver that reports nonsense) */
    unsigned long long free_mib;
    unsigned int util, mem_util, temp, power_mw, limit_mw;
    unsigned long long throttle; /* nvmlClocksEventReason* bits */
} gpu_t;

typedef struct {
    unsigned int gpu, pid;
    int has_used;
    unsigned long long used_mib;
} proc_t;

typedef struct {
    char fn[96];
    int gpu; /* -1: every GPU */
    int code;
    long ms;
} rule_t;

typedef struct {
    int ok;
    int init_error;
    char driver[80];
    unsigned int count;
    gpu_t gpus[MAX_GPUS];
    unsigned int nprocs;
    proc_t procs[MAX_PROCS];
    unsigned int nerrors, ndelays;
    rule_t errors[MAX_RULES], delays[MAX_RULES];
} state_t;

static struct nvmlDevice_st g_devices[MAX_GPUS];
static int g_refcount = 0;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Split "key=value key2=value with spaces" into pairs (in place); calls cb for each. */
static int is_key_token(const char *t) {
    const char *q = t;
    while (*q && (isalnum((unsigned char)*q) || *q == '_')) q++;
    return q > t && *q == '=';
}

static void parse_pairs(char *s, void (*cb)(void *, const char *, const char *), void *ctx) {
    char *keys[32], *vals[32], *ends[32];
    int n = 0;
    char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        if (is_key_token(p) && n < 32) {
            if (n > 0) ends[n - 1] = p; /* previous value ends before this token */
            keys[n] = p;
            char *eq = strchr(p, '=');
            *eq = '\0';
            vals[n] = eq + 1;
            ends[n] = NULL;
            n++;
            p = eq + 1;
        }
        while (*p && *p != ' ' && *p != '\t') p++;
    }
    for (int i = 0; i < n; i++) {
        if (ends[i]) {
            char *e = ends[i];
            while (e > vals[i] && (e[-1] == ' ' || e[-1] == '\t')) e--;
            *e = '\0';
        }
    }
    for (int i = 0; i < n; i++) cb(ctx, keys[i], vals[i]);
}

static void gpu_pair(void *ctx, const char *k, const char *v) {
    gpu_t *g = ctx;
    if (!strcmp(k, "name")) snprintf(g->name, sizeof g->name, "%s", v);
    else if (!strcmp(k, "uuid")) snprintf(g->uuid, sizeof g->uuid, "%s", v);
    else if (!strcmp(k, "bus")) snprintf(g->bus, sizeof g->bus, "%s", v);
    else if (!strcmp(k, "total_mib")) g->total_mib = strtoull(v, NULL, 10);
    else if (!strcmp(k, "used_mib")) g->used_mib = strtoull(v, NULL, 10);
    else if (!strcmp(k, "reserved_mib")) g->reserved_mib = strtoull(v, NULL, 10);
    else if (!strcmp(k, "free_mib")) {
        g->has_free = 1;
        g->free_mib = strtoull(v, NULL, 10);
    }
    else if (!strcmp(k, "util")) g->util = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "mem_util")) g->mem_util = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "temp")) g->temp = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "power_mw")) g->power_mw = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "limit_mw")) g->limit_mw = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "throttle")) g->throttle = strtoull(v, NULL, 0);
}

static void proc_pair(void *ctx, const char *k, const char *v) {
    proc_t *pr = ctx;
    if (!strcmp(k, "pid")) pr->pid = (unsigned)strtoul(v, NULL, 10);
    else if (!strcmp(k, "used_mib")) {
        pr->used_mib = strtoull(v, NULL, 10);
        pr->has_used = 1;
    }
}

static void rule_pair(void *ctx, const char *k, const char *v) {
    rule_t *r = ctx;
    if (!strcmp(k, "gpu")) r->gpu = atoi(v);
    else if (!strcmp(k, "code")) r->code = atoi(v);
    else if (!strcmp(k, "ms")) r->ms = atol(v);
}

static void load_state(state_t *st) {
    memset(st, 0, sizeof *st);
    snprintf(st->driver, sizeof st->driver, "580.65.06");
    const char *path = getenv("KVTOP_FAKE_NVML_STATE");
    if (!path || !*path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    st->ok = 1;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        char *word = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = '\0';
        if (!strcmp(word, "driver")) {
            while (*p == ' ') p++;
            snprintf(st->driver, sizeof st->driver, "%s", p);
        } else if (!strcmp(word, "init_error")) {
            rule_t r = {.gpu = -1, .code = NVML_ERROR_UNKNOWN};
            parse_pairs(p, rule_pair, &r);
            st->init_error = r.code;
        } else if (!strcmp(word, "gpu")) {
            char *end;
            long idx = strtol(p, &end, 10);
            if (end == p || idx < 0 || idx >= MAX_GPUS) continue;
            gpu_t *g = &st->gpus[idx];
            memset(g, 0, sizeof *g);
            g->present = 1;
            snprintf(g->name, sizeof g->name, "Fake GPU");
            snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-%012ld", idx);
            snprintf(g->bus, sizeof g->bus, "00000000:%02lX:00.0", idx + 0x18);
            parse_pairs(end, gpu_pair, g);
        } else if (!strcmp(word, "proc")) {
            char *end;
            long idx = strtol(p, &end, 10);
            if (end == p || idx < 0 || st->nprocs >= MAX_PROCS) continue;
            proc_t *pr = &st->procs[st->nprocs++];
            memset(pr, 0, sizeof *pr);
            pr->gpu = (unsigned)idx;
            parse_pairs(end, proc_pair, pr);
        } else if (!strcmp(word, "error") || !strcmp(word, "absent") || !strcmp(word, "delay")) {
            int is_delay = !strcmp(word, "delay");
            unsigned int *n = is_delay ? &st->ndelays : &st->nerrors;
            if (*n >= MAX_RULES) continue;
            rule_t *r = is_delay ? &st->delays[*n] : &st->errors[*n];
            memset(r, 0, sizeof *r);
            r->gpu = -1;
            r->code = !strcmp(word, "absent") ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_ERROR_UNKNOWN;
            while (*p == ' ') p++;
            char *fn = p;
            while (*p && *p != ' ' && *p != '\t') p++;
            if (*p) *p++ = '\0';
            snprintf(r->fn, sizeof r->fn, "%s", fn);
            parse_pairs(p, rule_pair, r);
            (*n)++;
        }
    }
    fclose(f);
    /* count = number of gpu lines */
    st->count = 0;
    for (int i = 0; i < MAX_GPUS; i++)
        if (st->gpus[i].present) st->count++;
}

/*
 * Common entry: loads the state into *st, sleeps for a matching delay, and returns the NVML
 * code the call should fail with (0 to go on). gpu < 0: not a device call.
 */
static nvmlReturn_t enter(const char *fn, int gpu, int needs_init, state_t *st) {
    load_state(st);
    for (unsigned i = 0; i < st->ndelays; i++) {
        rule_t *r = &st->delays[i];
        if (!strcmp(r->fn, fn) && (r->gpu < 0 || r->gpu == gpu) && r->ms > 0) {
            struct timespec ts = {r->ms / 1000, (r->ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    if (!st->ok) return NVML_ERROR_DRIVER_NOT_LOADED;
    for (unsigned i = 0; i < st->nerrors; i++) {
        rule_t *r = &st->errors[i];
        if (!strcmp(r->fn, fn) && (r->gpu < 0 || r->gpu == gpu)) return r->code;
    }
    if (needs_init) {
        pthread_mutex_lock(&g_lock);
        int rc = g_refcount;
        pthread_mutex_unlock(&g_lock);
        if (rc <= 0) return NVML_ERROR_UNINITIALIZED;
    }
    if (gpu >= 0 && (gpu >= MAX_GPUS || !st->gpus[gpu].present)) return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

#define STATE_OR_FAIL(fn, gpu)                         \
    state_t *st = calloc(1, sizeof(state_t));          \
    if (!st) return NVML_ERROR_UNKNOWN;                \
    nvmlReturn_t ret = enter(fn, gpu, 1, st);          \
    if (ret != NVML_SUCCESS) {                         \
        free(st);                                      \
        return ret;                                    \
    }

static int dev_index(nvmlDevice_t d) {
    if (d < g_devices || d >= g_devices + MAX_GPUS) return MAX_GPUS; /* reads as lost */
    return (int)(d - g_devices);
}

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init and system ---- */

static nvmlReturn_t do_init(const char *fn) {
    state_t *st = calloc(1, sizeof(state_t));
    if (!st) return NVML_ERROR_UNKNOWN;
    nvmlReturn_t ret = enter(fn, -1, 0, st);
    if (ret == NVML_SUCCESS && st->init_error) ret = st->init_error;
    free(st);
    if (ret == NVML_SUCCESS) {
        pthread_mutex_lock(&g_lock);
        for (unsigned i = 0; i < MAX_GPUS; i++) g_devices[i].index = i;
        g_refcount++;
        pthread_mutex_unlock(&g_lock);
    }
    return ret;
}

EXPORT nvmlReturn_t nvmlInit(void) { return do_init("nvmlInit"); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init("nvmlInit_v2"); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init("nvmlInitWithFlags");
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&g_lock);
    int rc = g_refcount;
    if (g_refcount > 0) g_refcount--;
    pthread_mutex_unlock(&g_lock);
    return rc > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt received by GPU";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "Operating System Call Failed";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    STATE_OR_FAIL("nvmlSystemGetDriverVersion", -1);
    ret = copy_str(version, length, st->driver);
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    STATE_OR_FAIL("nvmlSystemGetNVMLVersion", -1);
    char buf[96];
    snprintf(buf, sizeof buf, "13.%s", st->driver);
    ret = copy_str(version, length, buf);
    free(st);
    return ret;
}

static nvmlReturn_t cuda_version(const char *fn, int *v) {
    STATE_OR_FAIL(fn, -1);
    if (!v) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *v = 13000;
    free(st);
    return ret;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    return cuda_version("nvmlSystemGetCudaDriverVersion", v);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    return cuda_version("nvmlSystemGetCudaDriverVersion_v2", v);
}

/* ---- devices ---- */

static nvmlReturn_t get_count(const char *fn, unsigned int *count) {
    STATE_OR_FAIL(fn, -1);
    if (!count) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *count = st->count;
    free(st);
    return ret;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return get_count("nvmlDeviceGetCount", c); }
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) {
    return get_count("nvmlDeviceGetCount_v2", c);
}

static nvmlReturn_t get_handle(const char *fn, unsigned int index, nvmlDevice_t *device) {
    if (index >= MAX_GPUS) return NVML_ERROR_INVALID_ARGUMENT;
    STATE_OR_FAIL(fn, (int)index);
    if (!device) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *device = &g_devices[index];
    free(st);
    return ret;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) {
    return get_handle("nvmlDeviceGetHandleByIndex", i, d);
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) {
    return get_handle("nvmlDeviceGetHandleByIndex_v2", i, d);
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetIndex", i);
    if (!index) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *index = (unsigned)i;
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetName", i);
    ret = copy_str(name, length, st->gpus[i].name);
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetUUID", i);
    ret = copy_str(uuid, length, st->gpus[i].uuid);
    free(st);
    return ret;
}

static nvmlReturn_t pci_info(const char *fn, nvmlDevice_t device, nvmlPciInfo_t *pci) {
    int i = dev_index(device);
    STATE_OR_FAIL(fn, i);
    if (!pci) {
        free(st);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    memset(pci, 0, sizeof *pci);
    const char *bus = st->gpus[i].bus;
    snprintf(pci->busId, sizeof pci->busId, "%s", bus);
    /* legacy: "0000:18:00.0" (4-digit domain) */
    const char *legacy = strlen(bus) > 4 ? bus + 4 : bus;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", legacy);
    sscanf(bus, "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
    pci->pciDeviceId = 0x233510DE;
    pci->pciSubSystemId = 0x18BE10DE;
    free(st);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return pci_info("nvmlDeviceGetPciInfo", d, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return pci_info("nvmlDeviceGetPciInfo_v2", d, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    return pci_info("nvmlDeviceGetPciInfo_v3", d, p);
}

static unsigned long long free_mib(const gpu_t *g) {
    if (g->has_free) return g->free_mib;
    unsigned long long taken = g->used_mib + g->reserved_mib;
    return g->total_mib > taken ? g->total_mib - taken : 0;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetMemoryInfo", i);
    if (!memory) ret = NVML_ERROR_INVALID_ARGUMENT;
    else {
        const gpu_t *g = &st->gpus[i];
        memory->total = g->total_mib * MIB;
        memory->used = (g->used_mib + g->reserved_mib) * MIB;
        memory->free = free_mib(g) * MIB;
    }
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetMemoryInfo_v2", i);
    if (!memory) ret = NVML_ERROR_INVALID_ARGUMENT;
    else {
        const gpu_t *g = &st->gpus[i];
        memory->total = g->total_mib * MIB;
        memory->reserved = g->reserved_mib * MIB;
        memory->used = g->used_mib * MIB;
        memory->free = free_mib(g) * MIB;
    }
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetUtilizationRates", i);
    if (!u) ret = NVML_ERROR_INVALID_ARGUMENT;
    else {
        u->gpu = st->gpus[i].util;
        u->memory = st->gpus[i].mem_util;
    }
    free(st);
    return ret;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *t) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetTemperature", i);
    if (!t) ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (sensor != 0) ret = NVML_ERROR_NOT_SUPPORTED;
    else *t = st->gpus[i].temp;
    free(st);
    return ret;
}

#define UINT_GETTER(NAME, FIELD)                                      \
    EXPORT nvmlReturn_t NAME(nvmlDevice_t device, unsigned int *out) { \
        int i = dev_index(device);                                    \
        STATE_OR_FAIL(#NAME, i);                                      \
        if (!out) ret = NVML_ERROR_INVALID_ARGUMENT;                  \
        else *out = st->gpus[i].FIELD;                                \
        free(st);                                                     \
        return ret;                                                   \
    }
UINT_GETTER(nvmlDeviceGetPowerUsage, power_mw)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, limit_mw)
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, limit_mw)

/* Clocks event reasons (called throttle reasons before NVML 12.535): the state's bitmask. */
static nvmlReturn_t clock_reasons(const char *fn, nvmlDevice_t device, unsigned long long *out,
                                  int supported) {
    int i = dev_index(device);
    STATE_OR_FAIL(fn, i);
    if (!out) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *out = supported ? 0x7FFULL : st->gpus[i].throttle;
    free(st);
    return ret;
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    return clock_reasons("nvmlDeviceGetCurrentClocksEventReasons", d, r, 0);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
                                                              unsigned long long *r) {
    return clock_reasons("nvmlDeviceGetCurrentClocksThrottleReasons", d, r, 0);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t d,
                                                             unsigned long long *r) {
    return clock_reasons("nvmlDeviceGetSupportedClocksEventReasons", d, r, 1);
}
EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t d,
                                                                unsigned long long *r) {
    return clock_reasons("nvmlDeviceGetSupportedClocksThrottleReasons", d, r, 1);
}

static nvmlReturn_t procs(const char *fn, nvmlDevice_t device, unsigned int *count,
                          nvmlProcessInfo_t *infos) {
    int i = dev_index(device);
    STATE_OR_FAIL(fn, i);
    if (!count) {
        free(st);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned n = 0;
    for (unsigned k = 0; k < st->nprocs; k++)
        if ((int)st->procs[k].gpu == i) n++;
    if (n == 0) {
        *count = 0;
    } else if (*count < n || !infos) {
        *count = n;
        ret = NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        unsigned j = 0;
        for (unsigned k = 0; k < st->nprocs; k++) {
            const proc_t *p = &st->procs[k];
            if ((int)p->gpu != i) continue;
            infos[j].pid = p->pid;
            infos[j].usedGpuMemory = p->has_used ? p->used_mib * MIB : ~0ULL;
            infos[j].gpuInstanceId = 0xFFFFFFFFu;
            infos[j].computeInstanceId = 0xFFFFFFFFu;
            j++;
        }
        *count = n;
    }
    free(st);
    return ret;
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned int *c,
                                                            nvmlProcessInfo_t *p) {
    return procs("nvmlDeviceGetComputeRunningProcesses_v2", d, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *c,
                                                            nvmlProcessInfo_t *p) {
    return procs("nvmlDeviceGetComputeRunningProcesses_v3", d, c, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *c,
                                                             nvmlProcessInfo_t *p) {
    (void)p;
    int i = dev_index(d);
    STATE_OR_FAIL("nvmlDeviceGetGraphicsRunningProcesses_v3", i);
    if (c) *c = 0;
    free(st);
    return ret;
}

/* ---- temperature (versioned API) and MIG handle check: answered from the state ---- */

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define NVML_TEMPERATURE_V1 (sizeof(nvmlTemperature_v1_t) | (1u << 24))

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *t) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceGetTemperatureV", i);
    if (!t) ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (t->version != NVML_TEMPERATURE_V1) ret = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    else if (t->sensorType != 0) ret = NVML_ERROR_NOT_SUPPORTED;
    else t->temperature = (int)st->gpus[i].temp;
    free(st);
    return ret;
}

/* Handles from nvmlDeviceGetHandleByIndex are whole GPUs, never MIG devices. */
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    int i = dev_index(device);
    STATE_OR_FAIL("nvmlDeviceIsMigDeviceHandle", i);
    if (!isMigDevice) ret = NVML_ERROR_INVALID_ARGUMENT;
    else *isMigDevice = 0;
    free(st);
    return ret;
}

/*
 * ---- functions peers such as nvitop call; a card without the feature answers NOT_SUPPORTED ----
 *
 * The state file holds no fan, clock, P-state, ECC, MIG, encoder/decoder, persistence,
 * compute-mode, display or per-process utilization data, so these answer
 * NVML_ERROR_NOT_SUPPORTED rather than invent values. Like a real driver they first check
 * init and the handle (UNINITIALIZED, GPU_IS_LOST), and error/absent/delay lines apply by name.
 * Signatures follow nvml.h; enums are ints and the structs behind pointers are never touched.
 *
 * nvmlDeviceGetConfComputeMemSizeInfo and nvmlDeviceGetRunningProcessDetailList are exported
 * together on purpose: nvitop uses a longer legacy nvmlProcessInfo_v3 struct when a driver has
 * the first without the second, which would not match what nvmlDeviceGetComputeRunningProcesses_v3
 * fills in here.
 */

typedef int nvmlClockType_t, nvmlComputeMode_t, nvmlEnableState_t, nvmlDriverModel_t,
    nvmlPstates_t, nvmlMemoryErrorType_t, nvmlEccCounterType_t;
typedef struct nvmlProcessUtilizationSample_st nvmlProcessUtilizationSample_t;
typedef struct nvmlConfComputeMemSizeInfo_st nvmlConfComputeMemSizeInfo_t;
typedef struct nvmlProcessDetailList_st nvmlProcessDetailList_t;

static nvmlReturn_t unsupported(const char *fn, nvmlDevice_t device) {
    int i = dev_index(device);
    STATE_OR_FAIL(fn, i);
    free(st);
    return NVML_ERROR_NOT_SUPPORTED;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define NOT_SUPPORTED_FN(NAME, ...)                              \
    EXPORT nvmlReturn_t NAME(nvmlDevice_t device, __VA_ARGS__) { \
        return unsupported(#NAME, device);                       \
    }

NOT_SUPPORTED_FN(nvmlDeviceGetFanSpeed, unsigned int *speed)
NOT_SUPPORTED_FN(nvmlDeviceGetPerformanceState, nvmlPstates_t *pState)
NOT_SUPPORTED_FN(nvmlDeviceGetPersistenceMode, nvmlEnableState_t *mode)
NOT_SUPPORTED_FN(nvmlDeviceGetDisplayActive, nvmlEnableState_t *isActive)
NOT_SUPPORTED_FN(nvmlDeviceGetComputeMode, nvmlComputeMode_t *mode)
NOT_SUPPORTED_FN(nvmlDeviceGetClockInfo, nvmlClockType_t type, unsigned int *clock)
NOT_SUPPORTED_FN(nvmlDeviceGetTotalEccErrors, nvmlMemoryErrorType_t errorType,
                 nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
NOT_SUPPORTED_FN(nvmlDeviceGetMigMode, unsigned int *currentMode, unsigned int *pendingMode)
NOT_SUPPORTED_FN(nvmlDeviceGetEncoderUtilization, unsigned int *utilization,
                 unsigned int *samplingPeriodUs)
NOT_SUPPORTED_FN(nvmlDeviceGetDecoderUtilization, unsigned int *utilization,
                 unsigned int *samplingPeriodUs)
NOT_SUPPORTED_FN(nvmlDeviceGetProcessUtilization, nvmlProcessUtilizationSample_t *utilization,
                 unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
/* WDDM/TCC driver models exist on Windows only; a Linux driver answers NOT_SUPPORTED. */
NOT_SUPPORTED_FN(nvmlDeviceGetDriverModel, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
NOT_SUPPORTED_FN(nvmlDeviceGetDriverModel_v2, nvmlDriverModel_t *current,
                 nvmlDriverModel_t *pending)
NOT_SUPPORTED_FN(nvmlDeviceGetConfComputeMemSizeInfo, nvmlConfComputeMemSizeInfo_t *memInfo)
NOT_SUPPORTED_FN(nvmlDeviceGetRunningProcessDetailList, nvmlProcessDetailList_t *plist)

#undef NOT_SUPPORTED_FN
#pragma GCC diagnostic pop
