// The Metal simulator's parts, shared between the Objective-C stand-in
// (objc.cpp: the runtime, Metal's objects, what encoders record and what the
// simulator checks as Metal's API validation does) and the executor
// (exec.cpp: MSL programs compiled as C++, threadgroups run as fibers, every
// memory access checked).
#pragma once
#include <stdint.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mcsim {

// errors: the simulator never aborts the host; what it finds is collected
// here and read back through mcsim_errors
void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// configuration (mcsim_config): the device's limits, and defects to plant
struct Config {
    long max_threads = 1024;        // maxTotalThreadsPerThreadgroup of every pipeline (at most)
    long simd_width = 32;           // threadExecutionWidth
    long group_memory = 32 << 10;   // maxThreadgroupMemoryLength
    long ignore_barriers = 0;       // memoryBarrierWithScope: recorded as nothing
    long reverse_concurrent = 1;    // run a concurrent span's dispatches last to first
};
extern Config config;

struct Class;
struct Object {
    Class* isa;
    std::atomic<int> refs{1};
};

// a buffer's storage: length bytes between two guard zones, registered so
// that every access a kernel makes is found to be in it, its guards or
// elsewhere
struct Storage {
    uint8_t* base;  // the allocation, guards included
    uint8_t* data;  // contents
    uint64_t length;
    struct Cell {
        uint32_t wserial, wepoch, rserial, repoch;
        uint16_t wtid, rtid;
        uint8_t rgroups;  // 2: reads by several groups in the span
    };
    std::vector<Cell> shadow;  // one a 2 bytes, made at a kernel's first access
};
constexpr uint64_t kGuard = 4096;
Storage* storage_new(uint64_t length);
void storage_free(Storage* s);

struct Buffer : Object {
    Storage* st;
    Object* device;
};

// a parameter of a kernel entry, as the program's compiled table gives it
struct Param {
    int kind;  // 0: device buffer pointer, 1: constant reference (bytes), 2: threadgroup pointer
    int index;
    int size;   // the referenced type's size (kind 1)
    int align;  // the pointee's alignment (kind 0)
    const char* name;
};

struct Kernel {
    std::string name;
    int max_threads;  // [[max_total_threads_per_threadgroup]], 0: none
    void (*entry)(const void* args);
    std::vector<Param> params;
};

struct Program {
    void* handle;
    std::map<std::string, Kernel> kernels;
};
// the planted defects: replacements made in every source compiled
std::vector<std::pair<std::string, std::string>>& plants();
// compile MSL source (cached by its text); nullptr with *err on failure
std::shared_ptr<Program> compile(const std::string& source, std::string* err);

struct Binding {
    Buffer* buffer = nullptr;
    uint64_t offset = 0;
    std::vector<uint8_t> bytes;  // set by setBytes
    bool set = false;
};

struct Command {
    bool barrier = false;
    const Kernel* kernel = nullptr;
    std::shared_ptr<Program> program;  // keeps kernel alive
    Binding bindings[31];
    uint64_t group_memory[31] = {};
    uint64_t groups = 0, threads = 0;
    std::vector<Buffer*> resident;  // useResource'd so far on the encoder
};

// run an encoder's commands (at commit); concurrent: dispatches between
// barriers may run in any order (and here run last to first)
void execute(const std::vector<Command>& commands, bool concurrent);

}  // namespace mcsim

// the arguments of one thread's entry call (exec.cpp writes the entry
// wrappers that read them)
struct mcsim_args {
    void* buffer[31];
    void* group[31];
    unsigned tid, ntid, gid, ngid, lane, simd, width;
};
