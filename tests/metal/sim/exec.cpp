// The Metal simulator's executor: MSL programs compiled as C++ against the
// simulator's <metal_stdlib> (include/), with an entry wrapper written for
// every kernel from its attributed parameters; threadgroups run as fibers,
// one group at a time; every load and store the program makes reaches the
// checks below through ThreadSanitizer's instrumentation hooks, which the
// simulator defines itself: buffers' bounds, residency and alignment, and
// races between barriers in threadgroup and device memory.
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <regex>
#include <sstream>

#include "sim.h"

#ifndef MCSIM_DEFAULT_INCLUDE
#define MCSIM_DEFAULT_INCLUDE "tests/metal/sim/include"
#endif
#ifndef MCSIM_DEFAULT_CACHE
#define MCSIM_DEFAULT_CACHE "build/metalsim/cache"
#endif

namespace mcsim {

static const char* env(const char* name, const char* otherwise) {
    const char* v = getenv(name);
    return v && *v ? v : otherwise;
}

// ---- storage, registered by address ----

static std::mutex storage_mu;
static std::map<uintptr_t, Storage*> storages;  // by the allocation's first byte

Storage* storage_new(uint64_t length) {
    uint64_t span = (length + kGuard - 1) / kGuard * kGuard + 2 * kGuard;
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    Storage* s = new Storage;
    s->base = (uint8_t*)p;
    s->data = s->base + kGuard;
    s->length = length;
    std::lock_guard<std::mutex> l(storage_mu);
    storages[(uintptr_t)s->base] = s;
    return s;
}

void storage_free(Storage* s) {
    {
        std::lock_guard<std::mutex> l(storage_mu);
        storages.erase((uintptr_t)s->base);
    }
    munmap(s->base, (s->length + kGuard - 1) / kGuard * kGuard + 2 * kGuard);
    delete s;
}

static Storage* storage_at(uintptr_t a) {
    std::lock_guard<std::mutex> l(storage_mu);  // a host thread may free a buffer meanwhile
    auto it = storages.upper_bound(a);
    if (it == storages.begin()) return nullptr;
    Storage* s = std::prev(it)->second;
    uint64_t span = (s->length + kGuard - 1) / kGuard * kGuard + 2 * kGuard;
    return a < (uintptr_t)s->base + span ? s : nullptr;
}

// ---- compiling a program ----

static uint64_t fnv(const std::string& s, uint64_t h = 1469598103934665603ull) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

static std::string read_file(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) return "";
    std::string s;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
    fclose(f);
    return s;
}

struct ParsedKernel {
    std::string name;
    int max_threads = 0;
    std::vector<std::string> args;  // the entry call's arguments
    std::vector<std::string> rows;  // the parameter table's rows
};

static std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\n"), b = s.find_last_not_of(" \t\n");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// one attributed parameter: its type, name, and the attribute's word and index
static bool parse_param(const std::string& p, ParsedKernel& k, std::string* err) {
    static const std::regex re(R"(^(.*?)([A-Za-z_]\w*)\s*\[\[\s*(\w+)\s*(?:\(\s*(\d+)\s*\))?\s*\]\]$)");
    std::smatch m;
    std::string t = trim(p);
    if (!std::regex_match(t, m, re)) {
        *err = "kernel " + k.name + ": parameter \"" + t + "\" has no attribute the simulator knows";
        return false;
    }
    std::string type = trim(m[1]), name = m[2], attr = m[3], idx = m[4];
    static const std::map<std::string, std::string> ids = {
        {"thread_position_in_threadgroup", "a->tid"},
        {"thread_index_in_threadgroup", "a->tid"},
        {"threads_per_threadgroup", "a->ntid"},
        {"threadgroup_position_in_grid", "a->gid"},
        {"threadgroups_per_grid", "a->ngid"},
        {"thread_position_in_grid", "a->gid * a->ntid + a->tid"},
        {"threads_per_grid", "a->ngid * a->ntid"},
        {"thread_index_in_simdgroup", "a->lane"},
        {"simdgroup_index_in_threadgroup", "a->simd"},
        {"threads_per_simdgroup", "a->width"},
    };
    if (attr == "buffer") {
        if (type.find('*') != std::string::npos) {
            k.args.push_back("(" + type + ")a->buffer[" + idx + "]");
            k.rows.push_back("{0, " + idx + ", 0, (int)mcsim_pointee_align<" + type + ">::value, \"" + name + "\"}");
        } else if (!type.empty() && type.back() == '&') {
            k.args.push_back("*(mcsim_noref<" + type + ">::type*)a->buffer[" + idx + "]");
            k.rows.push_back("{1, " + idx + ", (int)sizeof(mcsim_noref<" + type + ">::type), 0, \"" + name + "\"}");
        } else {
            *err = "kernel " + k.name + ": buffer parameter " + name + " is neither a pointer nor a reference";
            return false;
        }
    } else if (attr == "threadgroup") {
        k.args.push_back("(" + type + ")a->group[" + idx + "]");
        k.rows.push_back("{2, " + idx + ", 0, 0, \"" + name + "\"}");
    } else if (ids.count(attr)) {
        k.args.push_back(ids.at(attr));
    } else {
        *err = "kernel " + k.name + ": attribute " + attr + " is not one the simulator knows";
        return false;
    }
    return true;
}

// the program's kernels (their entry lines) and its text with every
// threadgroup variable placed in the group's memory
static bool translate(const std::string& src, std::string* out, std::vector<ParsedKernel>* kernels, std::string* err) {
    static const std::regex group_var(R"(^(\s*)threadgroup\s+([A-Za-z_][\w:<> ]*?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]+\])*)\s*;\s*$)");
    static const std::regex head(R"((?:\[\[\s*max_total_threads_per_threadgroup\s*\(\s*(\d+)\s*\)\s*\]\]\s*)?kernel\s+void\s+([A-Za-z_]\w*)\s*\()");
    std::istringstream in(src);
    std::string line;
    std::ostringstream text;
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_match(line, m, group_var)) {
            std::string type = m[2], name = m[3], dims = m[4];
            std::string whole = type + dims;
            text << m[1] << "auto& " << name << " = *(" << type << "(*)" << dims << ")mcsim_group_alloc(sizeof(" << whole
                 << "), alignof(" << whole << "));\n";
        } else {
            text << line << "\n";
        }
    }
    *out = text.str();
    for (std::sregex_iterator it(out->begin(), out->end(), head), end; it != end; ++it) {
        ParsedKernel k;
        k.name = (*it)[2];
        if ((*it)[1].matched) k.max_threads = atoi((*it)[1].str().c_str());
        size_t i = it->position() + it->length(), depth = 1, start = i;
        std::vector<std::string> params;
        for (; i < out->size() && depth > 0; i++) {
            char c = (*out)[i];
            if (c == '(' || c == '[') depth++;
            if (c == ')' || c == ']') depth--;
            if ((c == ',' && depth == 1) || depth == 0) {
                params.push_back(out->substr(start, i - start));
                start = i + 1;
            }
        }
        for (auto& p : params)
            if (!trim(p).empty() && !parse_param(p, k, err)) return false;
        kernels->push_back(k);
    }
    // the attributes are read: C++ would see macros in them (threadgroup)
    static const std::regex attrs(
        R"(\[\[\s*(?:buffer|threadgroup|max_total_threads_per_threadgroup|threads?_\w+|threadgroups?_\w+|simdgroup_\w+)\b[^\]]*\]\])");
    *out = std::regex_replace(*out, attrs, "");
    return true;
}

static std::string wrappers(const std::vector<ParsedKernel>& kernels) {
    std::ostringstream w;
    w << "\nstruct mcsim_args { void* buffer[31]; void* group[31]; unsigned tid, ntid, gid, ngid, lane, simd, width; };\n"
         "struct mcsim_param_row { int kind, index, size, align; const char* name; };\n";
    for (auto& k : kernels) {
        w << "extern \"C\" void mcsim_entry_" << k.name << "(const mcsim_args* a) { " << k.name << "(";
        for (size_t i = 0; i < k.args.size(); i++) w << (i ? ", " : "") << k.args[i];
        w << "); }\nextern \"C\" const mcsim_param_row mcsim_params_" << k.name << "[] = {";
        for (auto& r : k.rows) w << r << ", ";
        w << "{-1, 0, 0, 0, 0}};\n";
    }
    return w.str();
}

static std::mutex compile_mu;
static std::map<uint64_t, std::weak_ptr<Program>> programs;

std::vector<std::pair<std::string, std::string>>& plants() {
    static auto* p = new std::vector<std::pair<std::string, std::string>>;
    return *p;
}

std::shared_ptr<Program> compile(const std::string& original, std::string* err) {
    std::lock_guard<std::mutex> l(compile_mu);
    std::string source = original;
    for (auto& [from, to] : plants())
        for (size_t at = from.empty() ? std::string::npos : source.find(from); at != std::string::npos;
             at = source.find(from, at + to.size()))
            source.replace(at, from.size(), to);
    std::string include = env("MCSIM_INCLUDE", MCSIM_DEFAULT_INCLUDE), cache = env("MCSIM_CACHE", MCSIM_DEFAULT_CACHE);
    std::string cxx = env("MCSIM_CXX", "clang++-14");
    std::string flags =
        "-std=c++17 -O1 -fPIC -shared -w -fno-exceptions -fno-rtti -ffp-contract=off -fno-math-errno "
        "-fsanitize=thread -mllvm -tsan-instrument-func-entry-exit=0 -mllvm -tsan-instrument-memintrinsics=0 "
        "-mllvm -tsan-instrument-atomics=0";
    std::string text;
    std::vector<ParsedKernel> parsed;
    if (!translate(source, &text, &parsed, err)) return nullptr;
    text += wrappers(parsed);
    uint64_t key = fnv(text + flags + cxx, fnv(read_file(include + "/metal_stdlib")));
    if (auto p = programs[key].lock()) return p;
    char name[32];
    snprintf(name, sizeof name, "%016llx", (unsigned long long)key);
    std::string so = cache + "/" + name + ".so";
    if (access(so.c_str(), R_OK) != 0) {
        std::string mk = "mkdir -p '" + cache + "'";
        if (system(mk.c_str()) != 0) {
            *err = "cannot make the simulator's cache " + cache;
            return nullptr;
        }
        std::string tmp = cache + "/" + name + "." + std::to_string(getpid());
        FILE* f = fopen((tmp + ".cpp").c_str(), "wb");
        if (!f) {
            *err = "cannot write " + tmp + ".cpp";
            return nullptr;
        }
        fwrite(text.data(), 1, text.size(), f);
        fclose(f);
        std::string cmd = cxx + " " + flags + " -I'" + include + "' -o '" + tmp + ".so' '" + tmp + ".cpp' 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        std::string out;
        char buf[4096];
        size_t n;
        while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
        int rc = p ? pclose(p) : -1;
        if (rc != 0) {
            *err = "the MSL program does not compile (" + tmp + ".cpp):\n" + out.substr(0, 4000);
            return nullptr;
        }
        unlink((tmp + ".cpp").c_str());
        if (rename((tmp + ".so").c_str(), so.c_str()) != 0) {
            *err = "cannot place " + so;
            return nullptr;
        }
    }
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *err = std::string("dlopen of the compiled program: ") + dlerror();
        return nullptr;
    }
    auto prog = std::make_shared<Program>();
    prog->handle = h;
    for (auto& pk : parsed) {
        Kernel k;
        k.name = pk.name;
        k.max_threads = pk.max_threads;
        k.entry = (void (*)(const void*))dlsym(h, ("mcsim_entry_" + pk.name).c_str());
        auto* rows = (const Param*)dlsym(h, ("mcsim_params_" + pk.name).c_str());
        if (!k.entry || !rows) {
            *err = "the compiled program lacks the entry of " + pk.name;
            return nullptr;
        }
        for (; rows->kind >= 0; rows++) k.params.push_back(*rows);
        prog->kernels[k.name] = k;
    }
    programs[key] = prog;
    return prog;
}

// ---- running: fibers, one threadgroup at a time ----

constexpr size_t kStack = 256 << 10;
constexpr size_t kArena = 256 << 10;  // room past Metal's 32 KB, to report what exceeds it
constexpr uint16_t kNone = 0xffff, kMany = 0xfffe, kMixed = 0xfffd;

enum State { Run, WaitGroup, WaitSimd, Done };
enum Kind { Barrier, Collect };

struct Fiber {
    void* sp;
    uint8_t* stack;
    State state;
    Kind kind;
    int flags;
    const void* mine;
    int size;
    void* all;
    unsigned* active;
    unsigned alloc_next;
    mcsim_args args;
};

struct TgCell {
    uint32_t serial, wg, ws, rg, rs;
    uint16_t wtid, rtid, rsimd;
};

extern "C" void mcsim_switch(void** save, void* to);
extern "C" void mcsim_fiber_start(void);

static std::mutex exec_mu;
static std::vector<Fiber> fibers;
static uint8_t* stacks;
static Fiber* cur;
static void* sched_sp;
static const Command* cur_cmd;
static std::vector<Storage*> reachable;  // bound or resident in the running dispatch
static uint32_t next_serial = 1, next_epoch = 1, span_start;
static unsigned reports;  // races and faults reported for the running dispatch
// the watchdog: a dispatch that makes this many memory accesses is stopped
// (a GPU's would be killed), so a kernel that loops forever fails its test
static uint64_t accesses;
static bool stopped;
constexpr uint64_t kWatchdog = 1ull << 31;

static struct Group {
    uint32_t serial, tg_epoch, dev_epoch;
    std::vector<uint32_t> simd_epoch;
    uint8_t* arena;
    std::vector<TgCell> shadow;
    size_t used;
    std::vector<std::pair<size_t, size_t>> allocs;  // static variables: offset, size
    unsigned n, width;
} G;

static void report(const char* what, const Fiber* f, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char* what, const Fiber* f, const char* fmt, ...) {
    if (++reports > 4) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fail("%s: %s in threadgroup %u, thread %u: %s", cur_cmd->kernel->name.c_str(), what, f->args.gid, f->args.tid, buf);
}

static void fiber_main(Fiber* f) {
    cur_cmd->kernel->entry(&f->args);
    f->state = Done;
    cur = nullptr;
    mcsim_switch(&f->sp, sched_sp);
    __builtin_trap();
}

static void yield(Fiber* f, State s, Kind k) {
    f->state = s;
    f->kind = k;
    cur = nullptr;
    mcsim_switch(&f->sp, sched_sp);
}

static void setup(Fiber* f) {
    uint8_t* top = f->stack + kStack;
    void** sp = (void**)(top - 72);
    sp[0] = sp[1] = sp[2] = nullptr;        // r15, r14, r13
    sp[3] = (void*)fiber_main;              // r12
    sp[4] = f;                              // rbx
    sp[5] = nullptr;                        // rbp
    sp[6] = (void*)mcsim_fiber_start;       // return address
    f->sp = sp;
}

// release the SIMD group s if every live lane waits at the same operation
static bool release_simd(unsigned s) {
    unsigned lo = s * G.width, hi = std::min(G.n, lo + G.width);
    Fiber* first = nullptr;
    for (unsigned i = lo; i < hi; i++) {
        Fiber& f = fibers[i];
        if (f.state == Done) continue;
        if (f.state != WaitSimd) return false;
        if (!first) first = &f;
    }
    if (!first) return false;
    for (unsigned i = lo; i < hi; i++) {
        Fiber& f = fibers[i];
        if (f.state == Done) continue;
        if (f.kind != first->kind || f.flags != first->flags || f.size != first->size)
            report("divergence", &f, "lanes of SIMD group %u are at different SIMD-group operations", s);
    }
    if (first->kind == Collect) {
        for (unsigned i = lo; i < hi; i++) {
            Fiber& x = fibers[i];
            if (x.state == Done) continue;
            x.active[0] = x.active[1] = 0;
            for (unsigned j = lo; j < hi; j++) {
                Fiber& y = fibers[j];
                if (y.state == Done || y.size != x.size) continue;
                memcpy((uint8_t*)x.all + (j - lo) * x.size, y.mine, x.size);
                x.active[(j - lo) / 32] |= 1u << ((j - lo) % 32);
            }
        }
    } else if (first->flags & 2) {
        G.simd_epoch[s]++;
    }
    for (unsigned i = lo; i < hi; i++)
        if (fibers[i].state == WaitSimd) fibers[i].state = Run;
    return true;
}

static bool release_group() {
    Fiber* first = nullptr;
    for (unsigned i = 0; i < G.n; i++) {
        Fiber& f = fibers[i];
        if (f.state == Done) continue;
        if (f.state != WaitGroup) return false;
        if (!first) first = &f;
    }
    if (!first) return false;
    for (unsigned i = 0; i < G.n; i++) {
        Fiber& f = fibers[i];
        if (f.state != Done && f.flags != first->flags)
            report("divergence", &f, "threads of the group are at barriers of different mem_flags");
    }
    if (first->flags & 2) G.tg_epoch++;
    if (first->flags & 1) G.dev_epoch = next_epoch++;
    for (unsigned i = 0; i < G.n; i++)
        if (fibers[i].state == WaitGroup) fibers[i].state = Run;
    return true;
}

static void run_group(const Command& c, uint32_t gid, void* const* buffers, const uint64_t* dyn_offset) {
    G.serial = next_serial++;
    G.tg_epoch = 1;
    G.dev_epoch = next_epoch++;
    G.n = c.threads;
    G.width = config.simd_width;
    G.simd_epoch.assign((G.n + G.width - 1) / G.width, 1);
    G.allocs.clear();
    G.used = dyn_offset[31];
    for (size_t i = 0; i < kArena; i += 2) G.arena[i] = 0xc0, G.arena[i + 1] = 0x7f;  // NaN, as uninitialized
    for (unsigned t = 0; t < G.n; t++) {
        Fiber& f = fibers[t];
        f.state = Run;
        f.alloc_next = 0;
        memcpy(f.args.buffer, buffers, sizeof f.args.buffer);
        for (int i = 0; i < 31; i++) f.args.group[i] = G.arena + dyn_offset[i];
        f.args.tid = t, f.args.ntid = G.n, f.args.gid = gid, f.args.ngid = c.groups;
        f.args.lane = t % G.width, f.args.simd = t / G.width, f.args.width = G.width;
        setup(&f);
    }
    for (;;) {
        if (stopped) break;
        bool any = false;
        for (unsigned t = 0; t < G.n; t++) {
            Fiber& f = fibers[t];
            if (f.state != Run) continue;
            any = true;
            cur = &f;
            mcsim_switch(&sched_sp, f.sp);
        }
        bool released = false;
        for (unsigned s = 0; s < G.simd_epoch.size(); s++) released |= release_simd(s);
        if (!released) released = release_group();
        if (released) continue;
        bool live = false;
        for (unsigned t = 0; t < G.n; t++) live |= fibers[t].state != Done;
        if (!live) break;
        if (!any) {
            for (unsigned t = 0; t < G.n; t++)
                if (fibers[t].state != Done) {
                    report("hang", &fibers[t], "threads wait at different barriers or SIMD-group operations");
                    break;
                }
            break;
        }
    }
    if (G.used > (size_t)config.group_memory && reports++ < 4)
        fail("%s: %zu bytes of threadgroup memory, the device has %ld", c.kernel->name.c_str(), G.used, config.group_memory);
}

static void run_dispatch(const Command& c) {
    cur_cmd = &c;
    reports = 0;
    accesses = 0;
    stopped = false;
    reachable.clear();
    void* buffers[31] = {};
    for (int i = 0; i < 31; i++) {
        const Binding& b = c.bindings[i];
        if (b.buffer) {
            buffers[i] = b.buffer->st->data + b.offset;
            reachable.push_back(b.buffer->st);
        } else if (!b.bytes.empty()) {
            buffers[i] = (void*)b.bytes.data();
        }
    }
    for (Buffer* r : c.resident) reachable.push_back(r->st);
    uint64_t dyn[32] = {};  // each dynamic threadgroup index's offset; [31]: their end
    uint64_t at = 0;
    for (int i = 0; i < 31; i++) {
        dyn[i] = at;
        at += (c.group_memory[i] + 15) / 16 * 16;
    }
    dyn[31] = at;
    if (at > kArena / 2) {
        fail("%s: %lu bytes of threadgroup memory set (not run)", c.kernel->name.c_str(), (unsigned long)at);
        return;
    }
    if (c.threads == 0 || c.threads > 1024 || (uint64_t)config.simd_width * 64 < c.threads) return;  // refused at dispatch
    for (uint32_t g = 0; g < c.groups && !stopped; g++) run_group(c, g, buffers, dyn);
    if (reports > 4) fail("%s: %u more problems in this dispatch", c.kernel->name.c_str(), reports - 4);
    cur_cmd = nullptr;
}

void execute(const std::vector<Command>& commands, bool concurrent) {
    std::lock_guard<std::mutex> l(exec_mu);
    if (!stacks) {
        stacks = (uint8_t*)mmap(nullptr, kStack * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                -1, 0);
        G.arena = (uint8_t*)mmap(nullptr, kArena, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        G.shadow.resize(kArena / 2);
        fibers.resize(1024);
        for (size_t i = 0; i < 1024; i++) fibers[i].stack = stacks + i * kStack;
    }
    for (size_t i = 0; i < commands.size();) {
        if (commands[i].barrier) {
            i++;
            continue;
        }
        size_t j = i + 1;
        if (concurrent)
            while (j < commands.size() && !commands[j].barrier) j++;
        // the span's dispatches may run in any order and overlap: here last
        // to first, and what one writes is unordered with what another
        // touches
        span_start = next_serial;
        for (size_t k = 0; k < j - i; k++)
            run_dispatch(commands[concurrent && config.reverse_concurrent ? j - 1 - k : i + k]);
        i = j;
    }
}

// ---- the checks every access goes through ----

static bool device_ordered(uint32_t serial, uint16_t tid, uint32_t epoch, const Fiber* f) {
    if (serial < span_start) return true;  // an earlier span (or never)
    if (serial != G.serial) return false;  // another threadgroup of the span
    return tid == f->args.tid || epoch < G.dev_epoch;
}

static void device_access(Fiber* f, Storage* s, uintptr_t a, unsigned n, bool write, bool aligned) {
    uintptr_t d = (uintptr_t)s->data;
    if (a < d || a + n > d + s->length) {
        report("out of bounds", f, "%s %u bytes at byte %ld of a %lu-byte buffer", write ? "writes" : "reads", n,
               (long)(a - d), (unsigned long)s->length);
        return;
    }
    if (aligned && n > 1 && a % n) report("misaligned", f, "a %u-byte access at byte %lu", n, (unsigned long)(a - d));
    if (std::find(reachable.begin(), reachable.end(), s) == reachable.end())
        report("not resident", f, "a buffer neither bound nor made resident (useResource) is %s",
               write ? "written" : "read");
    if (s->shadow.empty()) s->shadow.resize(s->length / 2 + 1);
    for (uint64_t i = (a - d) / 2; i <= (a - d + n - 1) / 2; i++) {
        Storage::Cell& c = s->shadow[i];
        if (!device_ordered(c.wserial, c.wtid, c.wepoch, f)) {
            report("race", f, "%s device byte %lu, which thread %u of group serial %u wrote, with no mem_device barrier between",
                   write ? "writes" : "reads", (unsigned long)(2 * i), c.wtid, c.wserial);
        }
        if (write) {
            bool reads_unordered = c.rserial >= span_start &&
                                   (c.rgroups || c.rserial != G.serial || (c.repoch >= G.dev_epoch && c.rtid != f->args.tid));
            if (reads_unordered)
                report("race", f, "writes device byte %lu, which other threads read, with no mem_device barrier between",
                       (unsigned long)(2 * i));
            c.wserial = G.serial, c.wtid = f->args.tid, c.wepoch = G.dev_epoch;
            c.rserial = 0;
        } else if (c.rserial < span_start) {
            c.rserial = G.serial, c.rtid = f->args.tid, c.repoch = G.dev_epoch, c.rgroups = 0;
        } else if (c.rserial != G.serial) {
            c.rgroups = 1, c.rserial = G.serial, c.rtid = f->args.tid, c.repoch = G.dev_epoch;
        } else if (c.repoch < G.dev_epoch) {
            c.rtid = f->args.tid, c.repoch = G.dev_epoch;
        } else if (c.rtid != f->args.tid) {
            c.rtid = kMany;
        }
    }
}

static bool group_ordered(uint16_t tid, uint32_t g, uint32_t s, const Fiber* f) {
    if (tid == kNone || tid == f->args.tid || g < G.tg_epoch) return true;
    return tid / G.width == f->args.simd && s < G.simd_epoch[f->args.simd];
}

static void group_access(Fiber* f, size_t off, unsigned n, bool write, bool aligned) {
    if (off + n > G.used) {
        report("out of bounds", f, "%s threadgroup memory at byte %zu, past the %zu bytes the kernel has",
               write ? "writes" : "reads", off, G.used);
        return;
    }
    if (aligned && n > 1 && off % n) report("misaligned", f, "a %u-byte threadgroup access at byte %zu", n, off);
    uint32_t g = G.tg_epoch, s = G.simd_epoch[f->args.simd];
    uint16_t tid = f->args.tid, simd = f->args.simd;
    for (size_t i = off / 2; i <= (off + n - 1) / 2; i++) {
        TgCell& c = G.shadow[i];
        if (c.serial != G.serial) c = TgCell{G.serial, 0, 0, 0, 0, kNone, kNone, kNone};
        if (!group_ordered(c.wtid, c.wg, c.ws, f))
            report("race", f, "%s threadgroup byte %zu, which thread %u wrote, with no barrier between",
                   write ? "writes" : "reads", 2 * i, c.wtid);
        if (write) {
            bool unordered = c.rtid != kNone && c.rg == g && c.rtid != tid && !(c.rsimd == simd && c.rs < s);
            if (unordered)
                report("race", f, "writes threadgroup byte %zu, which other threads read, with no barrier between", 2 * i);
            c.wtid = tid, c.wg = g, c.ws = s, c.rtid = kNone;
        } else if (c.rtid == kNone || c.rg < g || (c.rsimd == simd && c.rs < s)) {
            // a read that every earlier one is ordered before (an earlier
            // threadgroup epoch, or an earlier SIMD-group epoch of this same
            // SIMD group) replaces them: a later write is unordered with it
            // wherever it would have been with them
            c.rtid = tid, c.rsimd = simd, c.rg = g, c.rs = s;
        } else {
            if (c.rtid != tid) c.rtid = kMany;
            if (c.rsimd != simd) c.rsimd = kMixed;
            c.rs = std::max(c.rs, s);
        }
    }
}

static inline void check_access(void* p, unsigned n, bool write, bool aligned) {
    Fiber* f = cur;
    if (!f) return;
    if ((uintptr_t)p < 65536 && !stopped) {  // the access would fault: stop the dispatch before it
        report("null pointer", f, "%s %u bytes at address %p", write ? "writes" : "reads", n, p);
        stopped = true;
    }
    if (++accesses > kWatchdog && !stopped) {
        stopped = true;
        fail("%s: stopped after %llu memory accesses (does it loop forever?)", cur_cmd->kernel->name.c_str(),
             (unsigned long long)kWatchdog);
    }
    if (stopped) {
        f->state = Done;
        cur = nullptr;
        mcsim_switch(&f->sp, sched_sp);
    }
    uintptr_t a = (uintptr_t)p;
    if (a - (uintptr_t)G.arena < kArena) return group_access(f, a - (uintptr_t)G.arena, n, write, aligned);
    if (Storage* s = storage_at(a)) device_access(f, s, a, n, write, aligned);
}

}  // namespace mcsim

using namespace mcsim;

extern "C" {

void mcsim_barrier(int scope, int flags) {
    Fiber* f = cur;
    f->flags = flags;
    f->size = 0;
    yield(f, scope == 0 ? WaitGroup : WaitSimd, Barrier);
}

void mcsim_simd_collect(const void* mine, int size, void* all, unsigned* active) {
    Fiber* f = cur;
    f->flags = 0;
    f->mine = mine, f->size = size, f->all = all, f->active = active;
    yield(f, WaitSimd, Collect);
}

unsigned mcsim_simd_lane(void) { return cur->args.lane; }
unsigned mcsim_simd_width(void) { return G.width; }

void* mcsim_group_alloc(unsigned long size, unsigned long align) {
    Fiber* f = cur;
    unsigned k = f->alloc_next++;
    if (k < G.allocs.size()) {
        if (G.allocs[k].second != size) report("divergence", f, "threads declare different threadgroup variables");
        return G.arena + G.allocs[k].first;
    }
    size_t off = (G.used + align - 1) / align * align;
    if (off + size > kArena / 2) {
        report("threadgroup memory", f, "%lu bytes more do not fit", size);
        off = kArena / 2;
    }
    G.allocs.push_back({off, size});
    G.used = off + size;
    return G.arena + off;
}

float mcsim_expf(float x) { return expf(x); }
float mcsim_exp2f(float x) { return exp2f(x); }
float mcsim_logf(float x) { return logf(x); }
float mcsim_powf(float x, float y) { return powf(x, y); }
float mcsim_fmaf(float a, float b, float c) { return fmaf(a, b, c); }
float mcsim_ldexpf(float x, int e) { return ldexpf(x, e); }
float mcsim_frexpf(float x, int* e) { return frexpf(x, e); }
float mcsim_tanhf(float x) { return tanhf(x); }

// half conversions (round to nearest even; NaN stays NaN)
static uint16_t to_half(float v) {
    uint32_t x;
    memcpy(&x, &v, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    x &= 0x7fffffff;
    if (x > 0x7f800000) return sign | 0x7e00 | ((x >> 13) & 0x3ff);
    if (x >= 0x477ff000) return sign | 0x7c00;
    if (x >= 0x38800000) {
        uint32_t r = x - 0x38000000;
        r += 0xfff + ((r >> 13) & 1);
        return sign | (r >> 13);
    }
    if (x < 0x33000000) return sign;
    uint32_t e = x >> 23, m = (x & 0x7fffff) | 0x800000, shift = 126 - e;
    uint32_t res = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (res & 1))) res++;
    return sign | res;
}
static float from_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 0x3ff, x;
    if (e == 31) {
        x = sign | 0x7f800000 | (m << 13);
    } else if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float v;
    memcpy(&v, &x, 4);
    return v;
}
uint16_t mcsim_f2h(float v) { return to_half(v); }
float mcsim_h2f(uint16_t h) { return from_half(h); }

// ThreadSanitizer's instrumentation calls, defined here
void __tsan_init(void) {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit(void) {}
#define MCSIM_HOOKS(n)                                                                      \
    void __tsan_read##n(void* p) { check_access(p, n, false, true); }                            \
    void __tsan_write##n(void* p) { check_access(p, n, true, true); }                            \
    void __tsan_unaligned_read##n(void* p) { check_access(p, n, false, false); }                 \
    void __tsan_unaligned_write##n(void* p) { check_access(p, n, true, false); }
MCSIM_HOOKS(1)
MCSIM_HOOKS(2)
MCSIM_HOOKS(4)
MCSIM_HOOKS(8)
MCSIM_HOOKS(16)
void __tsan_read_range(void* p, unsigned long n) { check_access(p, n, false, false); }
void __tsan_write_range(void* p, unsigned long n) { check_access(p, n, true, false); }
void __tsan_vptr_read(void**) {}
void __tsan_vptr_update(void**, void*) {}

}  // extern "C"
