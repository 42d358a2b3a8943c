/*
 * A fake libamd_smi.so for tests: AMD's own Python binding (the `amdsmi` package) is served by
 * this library instead of the amdgpu driver.
 *
 * State comes from a small text file named by $FAKE_AMDSMI_FILE, re-read on every call, so a
 * test can change memory, processes and errors while the program under test runs. One key=value
 * a line ('#' starts a comment):
 *
 *   gpu_count=8                      how many GPUs amdsmi enumerates (default: the highest N
 *                                    of the gpu.N.* keys plus one); lower it and the handles of
 *                                    the GPUs past it answer AMDSMI_STATUS_NOT_FOUND
 *   driver=6.12.12                   amdgpu's version (amdsmi_get_gpu_driver_info)
 *   gpu.0.name=AMD Instinct MI300X   asic info's market name
 *   gpu.0.uuid=...  gpu.0.bus_id=0000:05:00.0
 *   gpu.0.mem_total=... gpu.0.mem_used=...   VRAM in bytes (amdsmi_get_gpu_memory_total/usage)
 *   gpu.0.gtt_total=... gpu.0.gtt_used=...   GTT (system memory the GPU maps) in bytes; 0 omitted
 *   gpu.0.util_gpu=61  gpu.0.util_mem=30     gfx and umc (memory controller) activity, %
 *   gpu.0.temp=55                    hotspot (junction) temperature, °C
 *   gpu.0.temp_edge=48               edge temperature; omitted: not supported, as on MI300X
 *   gpu.0.power_mw=400000  gpu.0.power_limit_mw=750000
 *                                    amdsmi answers whole watts (socket power, power limit) and
 *                                    the power cap in microwatts
 *   gpu.0.procs=1234:90000000000,1300:4096:2097152
 *                                    pid:VRAM bytes[:GTT bytes], each a process on the GPU
 *   error.amdsmi_get_gpu_activity=12 every call of that function answers that amdsmi status
 *   gpu.3.error.amdsmi_get_gpu_asic_info=6   that function fails for GPU 3 only
 *
 * With no state file set or readable, every call answers AMDSMI_STATUS_DRIVER_NOT_LOADED.
 * Sockets: one per GPU, each holding one processor handle. Every other function the binding
 * binds at import is a generated stub answering AMDSMI_STATUS_NOT_SUPPORTED (build.py writes
 * them from the installed amdsmi_wrapper.py); error.<function> applies to them too.
 *
 * Struct layouts are those amdsmi_wrapper.py's ctypes Structures declare (all _pack_ = 1, the
 * padding spelled out as PADDING_ fields); fake_amdsmi_struct_size() lets the tests compare.
 */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint32_t amdsmi_status_t;
enum {
    AMDSMI_STATUS_SUCCESS = 0,
    AMDSMI_STATUS_INVAL = 1,
    AMDSMI_STATUS_NOT_SUPPORTED = 2,
    AMDSMI_STATUS_OUT_OF_RESOURCES = 15,
    AMDSMI_STATUS_NOT_FOUND = 31,
    AMDSMI_STATUS_DRIVER_NOT_LOADED = 34,
    AMDSMI_STATUS_INSUFFICIENT_SIZE = 41,
};
enum { AMDSMI_MEM_TYPE_VRAM = 0, AMDSMI_MEM_TYPE_VIS_VRAM = 1, AMDSMI_MEM_TYPE_GTT = 2 };
enum { AMDSMI_TEMPERATURE_TYPE_EDGE = 0, AMDSMI_TEMPERATURE_TYPE_HOTSPOT = 1 };
enum { AMDSMI_TEMP_CURRENT = 0 };
enum { AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1 };

#define EXPORT __attribute__((visibility("default")))
#define PACKED __attribute__((packed))
#define MAX_GPUS 64
#define MAX_PROCS 64
#define MAX_RULES 128

/* ---- layouts as amdsmi_wrapper.py declares them ---------------------------------------- */

typedef struct PACKED {
    char market_name[256];
    uint32_t vendor_id;
    char vendor_name[256];
    uint32_t subvendor_id;
    uint64_t device_id;
    uint32_t rev_id;
    char asic_serial[256];
    uint32_t oam_id;
    uint32_t num_of_compute_units;
    uint8_t PADDING_0[4];
    uint64_t target_graphics_version;
    uint32_t subsystem_id;
    uint32_t reserved[21];
} amdsmi_asic_info_t;

typedef struct PACKED {
    uint32_t vram_total; /* MB */
    uint32_t vram_used;  /* MB */
    uint32_t reserved[2];
} amdsmi_vram_usage_t;

typedef struct PACKED {
    uint32_t gfx_activity;
    uint32_t umc_activity;
    uint32_t mm_activity;
    uint32_t reserved[13];
} amdsmi_engine_usage_t;

typedef struct PACKED {
    uint64_t socket_power; /* W */
    uint32_t current_socket_power;
    uint32_t average_socket_power;
    uint64_t gfx_voltage, soc_voltage, mem_voltage; /* mV */
    uint32_t power_limit; /* W */
    uint8_t PADDING_0[4];
    uint64_t reserved[18];
} amdsmi_power_info_t;

typedef struct PACKED {
    uint64_t power_cap; /* uW */
    uint64_t default_power_cap, dpm_cap, min_power_cap, max_power_cap;
    uint64_t reserved[3];
} amdsmi_power_cap_info_t;

typedef struct PACKED {
    char name[256];
    uint32_t pid;
    uint8_t PADDING_0[4];
    uint64_t mem;
    struct PACKED {
        uint64_t gfx, enc;
        uint32_t reserved[12];
    } engine_usage;
    struct PACKED {
        uint64_t gtt_mem, cpu_mem, vram_mem;
        uint32_t reserved[10];
    } memory_usage;
    char container_name[256];
    uint32_t cu_occupancy;
    uint32_t reserved[11];
} amdsmi_proc_info_t;

typedef union PACKED {
    struct PACKED {
        uint64_t function_number : 3;
        uint64_t device_number : 5;
        uint64_t bus_number : 8;
        uint64_t domain_number : 48;
    } fields;
    uint64_t as_uint;
} amdsmi_bdf_t;

typedef struct PACKED {
    char driver_version[256];
    char driver_date[256];
    char driver_name[256];
} amdsmi_driver_info_t;

typedef struct PACKED {
    uint32_t major, minor, release;
    uint8_t PADDING_0[4];
    const char *build;
} amdsmi_version_t;

EXPORT size_t fake_amdsmi_struct_size(const char *name) {
    if (!strcmp(name, "amdsmi_asic_info_t")) return sizeof(amdsmi_asic_info_t);
    if (!strcmp(name, "amdsmi_vram_usage_t")) return sizeof(amdsmi_vram_usage_t);
    if (!strcmp(name, "amdsmi_engine_usage_t")) return sizeof(amdsmi_engine_usage_t);
    if (!strcmp(name, "amdsmi_power_info_t")) return sizeof(amdsmi_power_info_t);
    if (!strcmp(name, "amdsmi_power_cap_info_t")) return sizeof(amdsmi_power_cap_info_t);
    if (!strcmp(name, "amdsmi_proc_info_t")) return sizeof(amdsmi_proc_info_t);
    if (!strcmp(name, "amdsmi_bdf_t")) return sizeof(amdsmi_bdf_t);
    if (!strcmp(name, "amdsmi_driver_info_t")) return sizeof(amdsmi_driver_info_t);
    if (!strcmp(name, "amdsmi_version_t")) return sizeof(amdsmi_version_t);
    return 0;
}

/* ---- state ------------------------------------------------------------------------------ */

typedef struct {
    uint32_t pid;
    uint64_t vram, gtt;
} proc_t;

typedef struct {
    int present;
    char name[256], uuid[64], bus_id[32];
    uint64_t mem_total, mem_used, gtt_total, gtt_used;
    uint32_t util_gpu, util_mem, temp, power_mw, power_limit_mw;
    int has_temp_edge;
    uint32_t temp_edge;
    int nprocs;
    proc_t procs[MAX_PROCS];
} gpu_t;

typedef struct {
    char fn[96];
    int gpu; /* -1: every GPU */
    uint32_t code;
} rule_t;

typedef struct {
    int ok;
    int count;
    char driver[64];
    gpu_t gpus[MAX_GPUS];
    int nrules;
    rule_t rules[MAX_RULES];
} state_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static state_t state;
/* Handles are addresses in these arrays: stable for the life of the process, never NULL. */
static char socket_tags[MAX_GPUS];
static char gpu_tags[MAX_GPUS];

static void parse_procs(gpu_t *g, const char *value) {
    const char *p = value;
    while (*p && g->nprocs < MAX_PROCS) {
        unsigned long long pid = 0, vram = 0, gtt = 0;
        int n = sscanf(p, "%llu:%llu:%llu", &pid, &vram, &gtt);
        if (n >= 2) {
            proc_t *pr = &g->procs[g->nprocs++];
            pr->pid = (uint32_t)pid;
            pr->vram = vram;
            pr->gtt = n == 3 ? gtt : 0;
        }
        const char *comma = strchr(p, ',');
        if (!comma) break;
        p = comma + 1;
    }
}

static void set_gpu_field(gpu_t *g, const char *field, const char *value) {
    unsigned long long v = strtoull(value, NULL, 0);
    g->present = 1;
    if (!strcmp(field, "name")) snprintf(g->name, sizeof g->name, "%s", value);
    else if (!strcmp(field, "uuid")) snprintf(g->uuid, sizeof g->uuid, "%s", value);
    else if (!strcmp(field, "bus_id")) snprintf(g->bus_id, sizeof g->bus_id, "%s", value);
    else if (!strcmp(field, "mem_total")) g->mem_total = v;
    else if (!strcmp(field, "mem_used")) g->mem_used = v;
    else if (!strcmp(field, "gtt_total")) g->gtt_total = v;
    else if (!strcmp(field, "gtt_used")) g->gtt_used = v;
    else if (!strcmp(field, "util_gpu")) g->util_gpu = (uint32_t)v;
    else if (!strcmp(field, "util_mem")) g->util_mem = (uint32_t)v;
    else if (!strcmp(field, "temp")) g->temp = (uint32_t)v;
    else if (!strcmp(field, "temp_edge")) { g->temp_edge = (uint32_t)v; g->has_temp_edge = 1; }
    else if (!strcmp(field, "power_mw")) g->power_mw = (uint32_t)v;
    else if (!strcmp(field, "power_limit_mw")) g->power_limit_mw = (uint32_t)v;
    else if (!strcmp(field, "procs")) parse_procs(g, value);
}

static void add_rule(const char *fn, int gpu, const char *value) {
    if (state.nrules >= MAX_RULES) return;
    rule_t *r = &state.rules[state.nrules++];
    snprintf(r->fn, sizeof r->fn, "%s", fn);
    r->gpu = gpu;
    r->code = (uint32_t)strtoull(value, NULL, 0);
}

static void parse_line(char *line, int *highest) {
    char *nl = strpbrk(line, "\r\n");
    if (nl) *nl = 0;
    if (line[0] == '#' || line[0] == 0) return;
    char *eq = strchr(line, '=');
    if (!eq) return;
    *eq = 0;
    const char *key = line, *value = eq + 1;
    if (!strcmp(key, "gpu_count")) {
        state.count = atoi(value);
    } else if (!strcmp(key, "driver")) {
        snprintf(state.driver, sizeof state.driver, "%s", value);
    } else if (!strncmp(key, "error.", 6)) {
        add_rule(key + 6, -1, value);
    } else if (!strncmp(key, "gpu.", 4)) {
        char *end;
        long idx = strtol(key + 4, &end, 10);
        if (end == key + 4 || *end != '.' || idx < 0 || idx >= MAX_GPUS) return;
        const char *field = end + 1;
        if (!strncmp(field, "error.", 6)) {
            add_rule(field + 6, (int)idx, value);
            return;
        }
        set_gpu_field(&state.gpus[idx], field, value);
        if (idx + 1 > *highest) *highest = (int)idx + 1;
    }
}

/* Re-read the state file; the caller holds the lock. */
static void load(void) {
    memset(&state, 0, sizeof state);
    state.count = -1;
    snprintf(state.driver, sizeof state.driver, "6.12.12");
    const char *path = getenv("FAKE_AMDSMI_FILE");
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[8192];
    int highest = 0;
    while (fgets(line, sizeof line, f)) parse_line(line, &highest);
    fclose(f);
    if (state.count < 0) state.count = highest;
    if (state.count > MAX_GPUS) state.count = MAX_GPUS;
    state.ok = 1;
}

/* The status a rule sets for FN on GPU (-1: a call without a GPU), else 0. */
static amdsmi_status_t rule_for(const char *fn, int gpu) {
    for (int i = 0; i < state.nrules; i++) {
        const rule_t *r = &state.rules[i];
        if (strcmp(r->fn, fn)) continue;
        if (r->gpu == -1 || r->gpu == gpu) return r->code;
    }
    return 0;
}

/* Load the state and check a call without a GPU; answers 0 to go on. */
static amdsmi_status_t begin(const char *fn) {
    load();
    if (!state.ok) return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    return rule_for(fn, -1);
}

/* Load the state and find the GPU behind HANDLE; answers 0 and *out to go on. */
static amdsmi_status_t begin_gpu(const char *fn, void *handle, gpu_t **out) {
    load();
    if (!state.ok) return AMDSMI_STATUS_DRIVER_NOT_LOADED;
    char *h = handle;
    if (h < gpu_tags || h >= gpu_tags + MAX_GPUS) return AMDSMI_STATUS_INVAL;
    int idx = (int)(h - gpu_tags);
    if (idx >= state.count) return AMDSMI_STATUS_NOT_FOUND;
    amdsmi_status_t code = rule_for(fn, idx);
    if (code) return code;
    *out = &state.gpus[idx];
    return 0;
}

#define GPU_CALL(fn, handle)                                                                 \
    gpu_t *g = NULL;                                                                         \
    pthread_mutex_lock(&lock);                                                               \
    amdsmi_status_t rc = begin_gpu(fn, handle, &g);                                          \
    if (rc) {                                                                                \
        pthread_mutex_unlock(&lock);                                                         \
        return rc;                                                                           \
    }

#define DONE(code)                                                                           \
    pthread_mutex_unlock(&lock);                                                             \
    return code;

/* ---- library ---------------------------------------------------------------------------- */

EXPORT amdsmi_status_t amdsmi_init(uint64_t flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin("amdsmi_init");
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_shut_down(void) {
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin("amdsmi_shut_down");
    DONE(rc);
}

EXPORT void amdsmi_free_name_value_pairs(void *p) { (void)p; }

EXPORT amdsmi_status_t amdsmi_get_lib_version(amdsmi_version_t *v) {
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin("amdsmi_get_lib_version");
    if (!rc) {
        if (!v) rc = AMDSMI_STATUS_INVAL;
        else {
            memset(v, 0, sizeof *v);
            v->major = 7;
            v->minor = 0;
            v->release = 2;
            v->build = "fake";
        }
    }
    DONE(rc);
}

/* The binding's optional ROCm version lookup (librocm-core.so, a link to this library). */
EXPORT uint32_t getROCmVersion(uint32_t *major, uint32_t *minor, uint32_t *patch) {
    if (!major || !minor || !patch) return 1;
    *major = 7;
    *minor = 0;
    *patch = 2;
    return 0;
}

/* One socket per GPU: list them (the binding asks twice, first with a NULL array for the count). */
EXPORT amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, void **handles) {
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin("amdsmi_get_socket_handles");
    if (!rc && !count) rc = AMDSMI_STATUS_INVAL;
    if (!rc) {
        if (!handles) {
            *count = (uint32_t)state.count;
        } else {
            uint32_t n = *count < (uint32_t)state.count ? *count : (uint32_t)state.count;
            for (uint32_t i = 0; i < n; i++) handles[i] = &socket_tags[i];
            *count = n;
        }
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles) {
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin("amdsmi_get_processor_handles");
    char *s = socket;
    if (!rc && (!count || s < socket_tags || s >= socket_tags + MAX_GPUS)) rc = AMDSMI_STATUS_INVAL;
    if (!rc) {
        int idx = (int)(s - socket_tags);
        if (idx >= state.count) rc = AMDSMI_STATUS_NOT_FOUND;
        else if (!handles) *count = 1;
        else if (*count < 1) rc = AMDSMI_STATUS_INSUFFICIENT_SIZE;
        else {
            handles[0] = &gpu_tags[idx];
            *count = 1;
        }
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_processor_type(void *handle, uint32_t *type) {
    GPU_CALL("amdsmi_get_processor_type", handle);
    (void)g;
    if (!type) rc = AMDSMI_STATUS_INVAL;
    else *type = AMDSMI_PROCESSOR_TYPE_AMD_GPU;
    DONE(rc);
}

/* ---- one GPU ---------------------------------------------------------------------------- */

EXPORT amdsmi_status_t amdsmi_get_gpu_asic_info(void *handle, amdsmi_asic_info_t *info) {
    GPU_CALL("amdsmi_get_gpu_asic_info", handle);
    if (!info) {
        rc = AMDSMI_STATUS_INVAL;
    } else {
        memset(info, 0, sizeof *info);
        snprintf(info->market_name, sizeof info->market_name, "%s", g->name);
        info->vendor_id = 0x1002;
        snprintf(info->vendor_name, sizeof info->vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
        info->subvendor_id = 0x1002;
        info->device_id = 0x74a1;
        info->rev_id = 0;
        snprintf(info->asic_serial, sizeof info->asic_serial, "%016X",
                 (unsigned)(0x5F000000u + (unsigned)(g - state.gpus)));
        info->oam_id = (uint32_t)(g - state.gpus);
        info->num_of_compute_units = 304;
        info->target_graphics_version = 0x942;
        info->subsystem_id = 0x74a1;
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_device_uuid(void *handle, uint32_t *length, char *uuid) {
    GPU_CALL("amdsmi_get_gpu_device_uuid", handle);
    if (!length || !uuid) rc = AMDSMI_STATUS_INVAL;
    else if (strlen(g->uuid) + 1 > *length) rc = AMDSMI_STATUS_INSUFFICIENT_SIZE;
    else {
        snprintf(uuid, *length, "%s", g->uuid);
        *length = (uint32_t)strlen(g->uuid) + 1;
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_device_bdf(void *handle, amdsmi_bdf_t *bdf) {
    GPU_CALL("amdsmi_get_gpu_device_bdf", handle);
    unsigned long long domain = 0;
    unsigned bus = 0, device = 0, function = 0;
    if (!bdf) rc = AMDSMI_STATUS_INVAL;
    else if (sscanf(g->bus_id, "%llx:%x:%x.%x", &domain, &bus, &device, &function) != 4)
        rc = AMDSMI_STATUS_NOT_SUPPORTED;
    else {
        bdf->as_uint = 0;
        bdf->fields.domain_number = domain;
        bdf->fields.bus_number = bus;
        bdf->fields.device_number = device;
        bdf->fields.function_number = function;
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_driver_info(void *handle, amdsmi_driver_info_t *info) {
    GPU_CALL("amdsmi_get_gpu_driver_info", handle);
    (void)g;
    if (!info) rc = AMDSMI_STATUS_INVAL;
    else {
        memset(info, 0, sizeof *info);
        snprintf(info->driver_version, sizeof info->driver_version, "%s", state.driver);
        snprintf(info->driver_date, sizeof info->driver_date, "2015/01/01 00:00");
        snprintf(info->driver_name, sizeof info->driver_name, "amdgpu");
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_memory_total(void *handle, uint32_t type, uint64_t *total) {
    GPU_CALL("amdsmi_get_gpu_memory_total", handle);
    if (!total) rc = AMDSMI_STATUS_INVAL;
    else if (type == AMDSMI_MEM_TYPE_VRAM || type == AMDSMI_MEM_TYPE_VIS_VRAM) *total = g->mem_total;
    else if (type == AMDSMI_MEM_TYPE_GTT) *total = g->gtt_total;
    else rc = AMDSMI_STATUS_INVAL;
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_memory_usage(void *handle, uint32_t type, uint64_t *used) {
    GPU_CALL("amdsmi_get_gpu_memory_usage", handle);
    if (!used) rc = AMDSMI_STATUS_INVAL;
    else if (type == AMDSMI_MEM_TYPE_VRAM || type == AMDSMI_MEM_TYPE_VIS_VRAM) *used = g->mem_used;
    else if (type == AMDSMI_MEM_TYPE_GTT) *used = g->gtt_used;
    else rc = AMDSMI_STATUS_INVAL;
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_vram_usage(void *handle, amdsmi_vram_usage_t *usage) {
    GPU_CALL("amdsmi_get_gpu_vram_usage", handle);
    if (!usage) rc = AMDSMI_STATUS_INVAL;
    else {
        memset(usage, 0, sizeof *usage);
        usage->vram_total = (uint32_t)(g->mem_total / (1024 * 1024));
        usage->vram_used = (uint32_t)(g->mem_used / (1024 * 1024));
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_gpu_activity(void *handle, amdsmi_engine_usage_t *usage) {
    GPU_CALL("amdsmi_get_gpu_activity", handle);
    if (!usage) rc = AMDSMI_STATUS_INVAL;
    else {
        memset(usage, 0, sizeof *usage);
        usage->gfx_activity = g->util_gpu;
        usage->umc_activity = g->util_mem;
        usage->mm_activity = 0;
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_temp_metric(void *handle, uint32_t sensor, uint32_t metric,
                                              int64_t *value) {
    GPU_CALL("amdsmi_get_temp_metric", handle);
    if (!value) rc = AMDSMI_STATUS_INVAL;
    else if (metric != AMDSMI_TEMP_CURRENT) rc = AMDSMI_STATUS_NOT_SUPPORTED;
    else if (sensor == AMDSMI_TEMPERATURE_TYPE_HOTSPOT) *value = g->temp;
    else if (sensor == AMDSMI_TEMPERATURE_TYPE_EDGE && g->has_temp_edge) *value = g->temp_edge;
    else rc = AMDSMI_STATUS_NOT_SUPPORTED;
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_power_info(void *handle, amdsmi_power_info_t *info) {
    GPU_CALL("amdsmi_get_power_info", handle);
    if (!info) rc = AMDSMI_STATUS_INVAL;
    else {
        memset(info, 0, sizeof *info);
        info->socket_power = g->power_mw / 1000;
        info->current_socket_power = g->power_mw / 1000;
        info->average_socket_power = 0xFFFF; /* MI300 and later: "N/A" */
        info->gfx_voltage = info->soc_voltage = info->mem_voltage = 0xFFFF;
        info->power_limit = g->power_limit_mw / 1000;
    }
    DONE(rc);
}

EXPORT amdsmi_status_t amdsmi_get_power_cap_info(void *handle, uint32_t sensor,
                                                 amdsmi_power_cap_info_t *info) {
    GPU_CALL("amdsmi_get_power_cap_info", handle);
    if (!info) rc = AMDSMI_STATUS_INVAL;
    else if (sensor != 0) rc = AMDSMI_STATUS_NOT_SUPPORTED;
    else {
        memset(info, 0, sizeof *info);
        info->power_cap = (uint64_t)g->power_limit_mw * 1000;
        info->default_power_cap = info->power_cap;
        info->max_power_cap = info->power_cap;
        info->min_power_cap = 0;
    }
    DONE(rc);
}

/* The processes using the GPU: *count in is the array's room, out how many were written. */
EXPORT amdsmi_status_t amdsmi_get_gpu_process_list(void *handle, uint32_t *count,
                                                   amdsmi_proc_info_t *list) {
    GPU_CALL("amdsmi_get_gpu_process_list", handle);
    if (!count) rc = AMDSMI_STATUS_INVAL;
    else if (!list) *count = (uint32_t)g->nprocs;
    else if (*count < (uint32_t)g->nprocs) {
        *count = (uint32_t)g->nprocs;
        rc = AMDSMI_STATUS_OUT_OF_RESOURCES;
    } else {
        for (int i = 0; i < g->nprocs; i++) {
            amdsmi_proc_info_t *p = &list[i];
            memset(p, 0, sizeof *p);
            snprintf(p->name, sizeof p->name, "python3");
            p->pid = g->procs[i].pid;
            p->mem = g->procs[i].vram + g->procs[i].gtt;
            p->memory_usage.vram_mem = g->procs[i].vram;
            p->memory_usage.gtt_mem = g->procs[i].gtt;
            p->cu_occupancy = 0xFFFFFFFFu;
        }
        *count = (uint32_t)g->nprocs;
    }
    DONE(rc);
}

/* ---- every other bound function --------------------------------------------------------- */

static amdsmi_status_t stub(const char *fn) {
    pthread_mutex_lock(&lock);
    amdsmi_status_t rc = begin(fn);
    pthread_mutex_unlock(&lock);
    return rc ? rc : AMDSMI_STATUS_NOT_SUPPORTED;
}

#define STUB(fn)                                                                             \
    EXPORT amdsmi_status_t fn(void) { return stub(#fn); }

/* Generated by build.py from the installed amdsmi_wrapper.py: the names it binds, less the
 * ones above. */
#include "fake_amdsmi_stubs.h"
