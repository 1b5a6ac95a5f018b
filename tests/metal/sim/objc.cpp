// The Metal simulator's Objective-C side: a stand-in for libobjc (classes,
// selectors, objc_msgSend through the assembly trampoline, autorelease
// pools), Metal's objects as metal-cpp declares their methods, encoders that
// record what they are given and check it as Metal's API validation does,
// and the control functions (mcsim_*) that tests drive it with.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <unordered_map>

#include "sim.h"

namespace mcsim {

Config config;

static std::mutex error_mu;
static std::string errors;
static int error_count;

void fail(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> l(error_mu);
    if (++error_count <= 50) errors += std::string(buf) + "\n";
}

// ---- the runtime ----

typedef void (*IMP)(void);

struct Class {
    const char* name;
    std::unordered_map<const char*, IMP> methods;
    void (*destroy)(Object*) = nullptr;
};

static std::mutex sel_mu;
static std::unordered_map<std::string, const char*>& selectors() {
    static auto* m = new std::unordered_map<std::string, const char*>;
    return *m;
}

static const char* sel(const char* name) {
    std::lock_guard<std::mutex> l(sel_mu);
    auto& m = selectors();
    auto it = m.find(name);
    if (it != m.end()) return it->second;
    const char* s = strdup(name);
    m[name] = s;
    return s;
}

// a class object: an Object whose isa is its metaclass (the class methods)
struct ClassObject : Object {
    Class* cls;
};

static std::unordered_map<std::string, ClassObject*>& classes() {
    static auto* m = new std::unordered_map<std::string, ClassObject*>;
    return *m;
}
static Class common{"NSObject"};
// a released object keeps its memory, marked freed: a message to it is
// reported, not a crash
static Class freed{"a freed object"};

static long ret_zero() { return 0; }

// the library is inside a call (mcsim_library): messages only a host sends
// are defects, and every message needs an autorelease pool in place
static int library_depth;
static thread_local std::vector<std::vector<Object*>> pools;

static const std::set<std::string> host_only = {
    "endEncoding", "commit", "waitUntilCompleted", "waitUntilScheduled", "commandBuffer",
    "computeCommandEncoder", "computeCommandEncoderWithDispatchType:", "newBufferWithLength:options:",
    "newCommandQueue", "newBufferWithBytes:length:options:"};

static IMP find(Object* self, const char* s) {
    auto& m = self->isa->methods;
    auto it = m.find(s);
    if (it != m.end()) return it->second;
    auto c = common.methods.find(s);
    return c == common.methods.end() ? nullptr : c->second;
}

}  // namespace mcsim

using namespace mcsim;

extern "C" {

__attribute__((visibility("default"))) IMP mcsim_lookup(Object* self, const char* s) {
    if (library_depth > 0) {
        if (pools.empty()) fail("[%s] sent by the library with no autorelease pool in place", s);
        if (host_only.count(s)) fail("the library sent [%s], which only the host may (it never ends, commits or waits)", s);
    }
    if (!self) return (IMP)ret_zero;
    if (self->isa == &freed) {
        fail("[%s] sent to a freed object", s);
        return (IMP)ret_zero;
    }
    IMP f = find(self, s);
    if (!f) {
        fail("unrecognized selector [%s %s]", self->isa->name, s);
        return (IMP)ret_zero;
    }
    return f;
}

__attribute__((visibility("default"))) void* objc_getClass(const char* name) {
    auto it = classes().find(name);
    return it == classes().end() ? nullptr : it->second;
}

__attribute__((visibility("default"))) const char* sel_registerName(const char* name) { return sel(name); }

__attribute__((visibility("default"))) void* objc_autoreleasePoolPush(void) {
    pools.emplace_back();
    return (void*)(uintptr_t)pools.size();
}

static void release(Object* o);

__attribute__((visibility("default"))) void objc_autoreleasePoolPop(void* token) {
    size_t depth = (size_t)(uintptr_t)token;
    if (depth == 0 || depth > pools.size()) {
        fail("objc_autoreleasePoolPop of a pool that is not open");
        return;
    }
    while (pools.size() >= depth) {
        std::vector<Object*> objs = std::move(pools.back());
        pools.pop_back();
        for (Object* o : objs) release(o);
    }
}

}  // extern "C"

// ---- objects ----

static void release(Object* o) {
    int left = --o->refs;
    if (left == 0) {
        if (o->isa->destroy) o->isa->destroy(o);
        o->isa = &freed;
    } else if (left < 0) {
        fail("%s released more often than retained", o->isa->name);
    }
}

static Object* autorelease(Object* o) {
    if (!o) return o;
    if (pools.empty()) {
        fail("%s autoreleased with no pool in place (it leaks)", o->isa->name);
        return o;
    }
    pools.back().push_back(o);
    return o;
}

typedef const char* SEL;
typedef unsigned long NSUInteger;
struct MTLSize {
    NSUInteger width, height, depth;
};

static Class* define(const char* name, std::initializer_list<std::pair<const char*, IMP>> methods,
                     std::initializer_list<std::pair<const char*, IMP>> class_methods = {},
                     void (*destroy)(Object*) = nullptr) {
    Class* c = new Class{name};
    c->destroy = destroy;
    for (auto& m : methods) c->methods[sel(m.first)] = m.second;
    Class* meta = new Class{name};
    for (auto& m : class_methods) meta->methods[sel(m.first)] = m.second;
    ClassObject* co = new ClassObject;
    co->isa = meta;
    co->refs = 1 << 30;
    co->cls = c;
    classes()[name] = co;
    return c;
}

template <class T>
static T* make(Class* c) {
    T* o = new T();
    o->isa = c;
    o->refs = 1;
    return o;
}

#define M(sel, fn) {sel, (IMP)(fn)}

struct String : Object {
    std::string s;
};
struct Error : Object {
    std::string text;
};
struct Options : Object {
    long math_mode = -1, fp_functions = -1, fast_math = -1;
};
struct Device : Object {};
struct Library : Object {
    std::shared_ptr<Program> program;
};
struct Function : Object {
    std::shared_ptr<Program> program;
    const Kernel* kernel;
};
struct Pipeline : Object {
    std::shared_ptr<Program> program;
    const Kernel* kernel;
};
struct Queue : Object {};
struct Encoder;
struct CommandBuffer : Object {
    std::vector<Encoder*> encoders;
    bool committed = false;
};
struct Encoder : Object {
    CommandBuffer* cb;
    Object* device;
    bool concurrent, ended = false;
    Pipeline* pipeline = nullptr;
    Binding bindings[31];
    uint64_t group_memory[31] = {};
    std::vector<Buffer*> resident;
    std::vector<Command> commands;
    // the buffers the host's own dispatches read and wrote since its last
    // barrier: a host such as MLX orders its own dispatches, and only them
    std::set<Buffer*> host_read, host_written;
};

static Class *StringClass, *ErrorClass, *OptionsClass, *DeviceClass, *LibraryClass, *FunctionClass, *PipelineClass,
    *BufferClass, *QueueClass, *CommandBufferClass, *EncoderClass;
static Device* the_device;  // the default device, and that of new encoders

static String* string(const std::string& s) {
    String* o = make<String>(StringClass);
    o->s = s;
    return o;
}

// NSObject
static Object* o_retain(Object* self, SEL) {
    self->refs++;
    return self;
}
static void o_release(Object* self, SEL) { release(self); }
static Object* o_autorelease(Object* self, SEL) { return autorelease(self); }
static signed char o_responds(Object* self, SEL, SEL s) { return find(self, s) != nullptr; }

// NSString
static Object* s_alloc(Object*, SEL) { return make<String>(StringClass); }
static Object* s_init(String* self, SEL, const char* s) {
    self->s = s ? s : "";
    return self;
}
static const char* s_utf8(String* self, SEL) { return self->s.c_str(); }
static Object* e_describe(Error* self, SEL) { return autorelease(string(self->text)); }

// MTLCompileOptions (macOS 15's: mathMode and mathFloatingPointFunctions)
static Object* opt_alloc(Object*, SEL) { return make<Options>(OptionsClass); }
static Object* o_init(Object* self, SEL) { return self; }
static void opt_math_mode(Options* self, SEL, long v) { self->math_mode = v; }
static void opt_fp_functions(Options* self, SEL, long v) { self->fp_functions = v; }
static void opt_fast_math(Options* self, SEL, signed char v) { self->fast_math = v; }

// MTLDevice
static Object* d_library(Device* self, SEL, String* src, Options* opts, Object** error) {
    if (error) *error = nullptr;
    if (!src || src->isa != StringClass) {
        fail("newLibraryWithSource: the source is not an NSString");
        return nullptr;
    }
    if (opts) {
        bool fast = opts->math_mode == 2 || (opts->math_mode == -1 && opts->fast_math != 0);
        if (fast) fail("newLibraryWithSource: fast math (the kernels' float32 sums would be reordered)");
        // macOS 15: the math mode alone leaves fmax, fmin and fabs at their
        // fast (NaN-unaware) forms
        if (!fast && opts->fp_functions != 1)
            fail("newLibraryWithSource: mathFloatingPointFunctions left at Fast (set it to Precise)");
    }
    std::string err;
    auto prog = compile(src->s, &err);
    if (!prog) {
        if (error) {
            Error* e = make<Error>(ErrorClass);
            e->text = err;
            *error = autorelease(e);
        }
        return nullptr;
    }
    Library* lib = make<Library>(LibraryClass);
    lib->program = prog;
    return lib;
}
static Object* d_pipeline(Device*, SEL, Function* fn, Object** error) {
    if (error) *error = nullptr;
    Pipeline* p = make<Pipeline>(PipelineClass);
    p->program = fn->program;
    p->kernel = fn->kernel;
    return p;
}
static Object* d_buffer(Device* self, SEL, NSUInteger length, NSUInteger options) {
    (void)options;
    Storage* st = storage_new(length);
    if (!st) return nullptr;
    Buffer* b = make<Buffer>(BufferClass);
    b->st = st;
    b->device = self;
    return b;
}
static Object* d_queue(Device*, SEL) { return make<Queue>(QueueClass); }
static Object* d_name(Device*, SEL) { return autorelease(string("metalcore simulator")); }

// MTLLibrary, MTLComputePipelineState
static Object* l_function(Library* self, SEL, String* name) {
    auto it = self->program->kernels.find(name->s);
    if (it == self->program->kernels.end()) return nullptr;
    Function* f = make<Function>(FunctionClass);
    f->program = self->program;
    f->kernel = &it->second;
    return f;
}
static NSUInteger p_max_threads(Pipeline* self, SEL) {
    long n = config.max_threads;
    if (self->kernel->max_threads > 0) n = std::min<long>(n, self->kernel->max_threads);
    return n;
}
static NSUInteger p_width(Pipeline*, SEL) { return config.simd_width; }

// MTLBuffer
static void* b_contents(Buffer* self, SEL) { return self->st->data; }
static NSUInteger b_length(Buffer* self, SEL) { return self->st->length; }
static uint64_t b_address(Buffer* self, SEL) { return (uint64_t)(uintptr_t)self->st->data; }
static Object* b_device(Buffer* self, SEL) { return self->device; }
static void b_destroy(Object* o) {
    Buffer* b = (Buffer*)o;
    storage_free(b->st);
    b->st = nullptr;
}

// MTLCommandQueue, MTLCommandBuffer
static Object* q_buffer(Queue*, SEL) {
    CommandBuffer* cb = make<CommandBuffer>(CommandBufferClass);
    return autorelease(cb);
}
static Encoder* new_encoder(CommandBuffer* cb, NSUInteger type) {
    for (Encoder* e : cb->encoders)
        if (!e->ended) fail("a compute encoder was made while another of the command buffer is open");
    Encoder* e = make<Encoder>(EncoderClass);
    e->cb = cb;
    e->device = the_device;
    e->concurrent = type == 1;  // MTLDispatchTypeConcurrent
    cb->encoders.push_back(e);  // the command buffer's reference
    return e;
}
static Object* cb_encoder_typed(CommandBuffer* self, SEL, NSUInteger type) {
    Encoder* e = new_encoder(self, type);
    e->refs++;
    return autorelease(e);
}
static Object* cb_encoder(CommandBuffer* self, SEL s) { return cb_encoder_typed(self, s, 0); }
static void cb_commit(CommandBuffer* self, SEL) {
    if (self->committed) {
        fail("commit of a committed command buffer");
        return;
    }
    self->committed = true;
    for (Encoder* e : self->encoders) {
        if (!e->ended) fail("commit with an encoder not ended");
        execute(e->commands, e->concurrent);
        for (Command& c : e->commands)
            for (auto& b : c.bindings)
                if (b.buffer) release(b.buffer);
        e->commands.clear();
    }
}
static void cb_wait(CommandBuffer* self, SEL) {
    if (!self->committed) fail("waitUntilCompleted before commit");
}
static void cb_destroy(Object* o) {
    CommandBuffer* cb = (CommandBuffer*)o;
    for (Encoder* e : cb->encoders) release(e);
}

// MTLComputeCommandEncoder
static bool open(Encoder* e, const char* what) {
    if (e->ended) fail("%s on an ended encoder", what);
    return !e->ended;
}
static Object* enc_device(Encoder* self, SEL) { return self->device; }
static NSUInteger enc_type(Encoder* self, SEL) { return self->concurrent ? 1 : 0; }
static void enc_pipeline(Encoder* self, SEL, Pipeline* p) {
    if (open(self, "setComputePipelineState:")) self->pipeline = p;
}
static void enc_buffer(Encoder* self, SEL, Buffer* b, NSUInteger offset, NSUInteger index) {
    if (!open(self, "setBuffer:offset:atIndex:")) return;
    if (index >= 31) {
        fail("setBuffer: index %lu is past Metal's 31", index);
        return;
    }
    if (b && offset > b->st->length) fail("setBuffer: offset %lu is past the buffer's %lu bytes", offset, (unsigned long)b->st->length);
    Binding& x = self->bindings[index];
    x = Binding{};
    x.buffer = b, x.offset = offset, x.set = true;
}
static void enc_bytes(Encoder* self, SEL, const void* data, NSUInteger length, NSUInteger index) {
    if (!open(self, "setBytes:length:atIndex:")) return;
    if (index >= 31) {
        fail("setBytes: index %lu is past Metal's 31", index);
        return;
    }
    if (length > 4096) fail("setBytes: %lu bytes at index %lu (Metal takes at most 4 KB inline)", length, index);
    if (!data) fail("setBytes: NULL data at index %lu", index);
    Binding& x = self->bindings[index];
    x = Binding{};
    if (data) x.bytes.assign((const uint8_t*)data, (const uint8_t*)data + length);
    x.set = true;
}
static void enc_group_memory(Encoder* self, SEL, NSUInteger length, NSUInteger index) {
    if (!open(self, "setThreadgroupMemoryLength:atIndex:")) return;
    if (index >= 31) {
        fail("setThreadgroupMemoryLength: index %lu is past Metal's 31", index);
        return;
    }
    if (length % 16) fail("setThreadgroupMemoryLength: %lu bytes is not a multiple of 16", length);
    self->group_memory[index] = length;
}
static void enc_use(Encoder* self, SEL, Buffer* b, NSUInteger usage) {
    if (!open(self, "useResource:usage:")) return;
    if (!b) {
        fail("useResource: nil");
        return;
    }
    if (!(usage & 3)) fail("useResource: usage %lu is neither read nor write", usage);
    self->resident.push_back(b);
}
static void enc_barrier(Encoder* self, SEL, NSUInteger scope) {
    if (!open(self, "memoryBarrierWithScope:")) return;
    if (!(scope & 1)) fail("memoryBarrierWithScope: %lu leaves buffers out", scope);
    if (config.ignore_barriers) return;
    Command c;
    c.barrier = true;
    self->commands.push_back(std::move(c));
}

// Metal's API validation of a dispatch, against the kernel's declaration
static bool validate(Encoder* e, const Kernel* k, const MTLSize& groups, const MTLSize& threads) {
    const char* name = k->name.c_str();
    int before = error_count;
    long most = config.max_threads;
    if (k->max_threads > 0) most = std::min<long>(most, k->max_threads);
    uint64_t n = threads.width * threads.height * threads.depth;
    if (n == 0 || n > (uint64_t)most)
        fail("%s: %lu threads a threadgroup, the pipeline's maximum is %ld", name, (unsigned long)n, most);
    if (threads.height != 1 || threads.depth != 1 || groups.height != 1 || groups.depth != 1)
        fail("%s: a dispatch of more than one dimension (the simulator runs one)", name);
    uint64_t dynamic = 0;
    for (const Param& p : k->params) {
        if (p.kind == 2) {
            dynamic = e->group_memory[p.index];
            if (dynamic == 0) fail("%s: threadgroup memory %d (%s) has no length set", name, p.index, p.name);
            continue;
        }
        const Binding& b = e->bindings[p.index];
        if (!b.set || (!b.buffer && b.bytes.empty())) {
            fail("%s: buffer %d (%s) is not bound%s", name, p.index, p.name, b.set ? " (nil)" : "");
            continue;
        }
        if (p.kind == 1) {
            uint64_t have = b.buffer ? b.buffer->st->length - b.offset : b.bytes.size();
            if (have < (uint64_t)p.size)
                fail("%s: %s at buffer %d takes %d bytes, %lu are bound", name, p.name, p.index, p.size, (unsigned long)have);
        } else if (b.buffer && b.offset % p.align) {
            fail("%s: %s at buffer %d bound at offset %lu, not a multiple of its element's %d bytes", name, p.name, p.index,
                 (unsigned long)b.offset, p.align);
        }
    }
    if (dynamic > (uint64_t)config.group_memory)
        fail("%s: %lu bytes of threadgroup memory, the device has %ld", name, (unsigned long)dynamic, config.group_memory);
    return error_count == before;
}

static void enc_dispatch(Encoder* self, SEL, MTLSize groups, MTLSize threads) {
    if (!open(self, "dispatchThreadgroups:threadsPerThreadgroup:")) return;
    if (!self->pipeline) {
        fail("dispatch with no pipeline set");
        return;
    }
    if (!validate(self, self->pipeline->kernel, groups, threads)) return;  // Metal would stop here
    Command c;
    c.kernel = self->pipeline->kernel;
    c.program = self->pipeline->program;
    for (int i = 0; i < 31; i++) {
        c.bindings[i] = self->bindings[i];
        if (c.bindings[i].buffer) c.bindings[i].buffer->refs++;  // a command buffer retains what it uses
    }
    std::copy(self->group_memory, self->group_memory + 31, c.group_memory);
    c.groups = groups.width;
    c.threads = threads.width;
    c.resident = self->resident;
    self->commands.push_back(std::move(c));
}
static void enc_end(Encoder* self, SEL) {
    if (self->ended) fail("endEncoding twice");
    self->ended = true;
}

static void define_classes() {
    common.methods[sel("retain")] = (IMP)o_retain;
    common.methods[sel("release")] = (IMP)o_release;
    common.methods[sel("autorelease")] = (IMP)o_autorelease;
    common.methods[sel("respondsToSelector:")] = (IMP)o_responds;
    StringClass = define("NSString", {M("initWithUTF8String:", s_init), M("UTF8String", s_utf8)}, {M("alloc", s_alloc)});
    ErrorClass = define("NSError", {M("localizedDescription", e_describe)}, {});
    OptionsClass = define("MTLCompileOptions",
                          {M("init", o_init), M("setMathMode:", opt_math_mode),
                           M("setMathFloatingPointFunctions:", opt_fp_functions), M("setFastMathEnabled:", opt_fast_math)},
                          {M("alloc", opt_alloc)});
    DeviceClass = define("MTLDevice",
                         {M("newLibraryWithSource:options:error:", d_library),
                          M("newComputePipelineStateWithFunction:error:", d_pipeline),
                          M("newBufferWithLength:options:", d_buffer), M("newCommandQueue", d_queue), M("name", d_name)});
    LibraryClass = define("MTLLibrary", {M("newFunctionWithName:", l_function)}, {});
    FunctionClass = define("MTLFunction", {}, {});
    PipelineClass = define("MTLComputePipelineState",
                           {M("maxTotalThreadsPerThreadgroup", p_max_threads), M("threadExecutionWidth", p_width)}, {});
    BufferClass = define("MTLBuffer",
                         {M("contents", b_contents), M("length", b_length), M("gpuAddress", b_address),
                          M("device", b_device)},
                         {}, b_destroy);
    QueueClass = define("MTLCommandQueue", {M("commandBuffer", q_buffer)}, {});
    CommandBufferClass = define("MTLCommandBuffer",
                                {M("computeCommandEncoder", cb_encoder),
                                 M("computeCommandEncoderWithDispatchType:", cb_encoder_typed), M("commit", cb_commit),
                                 M("waitUntilCompleted", cb_wait)},
                                {}, cb_destroy);
    EncoderClass = define("MTLComputeCommandEncoder",
                          {M("device", enc_device), M("dispatchType", enc_type),
                           M("setComputePipelineState:", enc_pipeline), M("setBuffer:offset:atIndex:", enc_buffer),
                           M("setBytes:length:atIndex:", enc_bytes),
                           M("setThreadgroupMemoryLength:atIndex:", enc_group_memory),
                           M("useResource:usage:", enc_use), M("memoryBarrierWithScope:", enc_barrier),
                           M("dispatchThreadgroups:threadsPerThreadgroup:", enc_dispatch), M("endEncoding", enc_end)},
                          {});
    the_device = make<Device>(DeviceClass);
    the_device->refs = 1 << 30;
}

// after every global above is made (static initialization runs in order)
static const bool classes_defined = (define_classes(), true);

// ---- Metal's entry point and the control functions ----

extern "C" {

__attribute__((visibility("default"))) void* MTLCreateSystemDefaultDevice(void) { return the_device; }

__attribute__((visibility("default"))) void* mcsim_new_buffer(unsigned long length) {
    return d_buffer(the_device, nullptr, length, 0);
}
__attribute__((visibility("default"))) void* mcsim_contents(void* buffer) { return ((Buffer*)buffer)->st->data; }
__attribute__((visibility("default"))) void mcsim_release(void* object) { release((Object*)object); }

// an open encoder on a new command buffer (retained: mcsim_finish ends and
// releases it)
__attribute__((visibility("default"))) void* mcsim_begin(int concurrent) {
    CommandBuffer* cb = make<CommandBuffer>(CommandBufferClass);
    return new_encoder(cb, concurrent ? 1 : 0);
}

// end the encoder, commit its command buffer and run it
__attribute__((visibility("default"))) void mcsim_finish(void* encoder) {
    Encoder* e = (Encoder*)encoder;
    enc_end(e, nullptr);
    cb_commit(e->cb, nullptr);
    release(e->cb);
}

// a planted defect: every MSL source compiled from now on has from
// replaced by to
__attribute__((visibility("default"))) void mcsim_plant(const char* from, const char* to) {
    plants().push_back({from, to});
}

// a host's own dispatch on encoder: copy bytes (even) from src to dst, as
// a framework's copy kernel would (through the simulator's MSL)
__attribute__((visibility("default"))) void mcsim_host_copy(void* encoder, void* dst, unsigned long dst_offset,
                                                            void* src, unsigned long src_offset, unsigned long bytes);

__attribute__((visibility("default"))) void mcsim_library(int inside) { library_depth += inside ? 1 : -1; }

__attribute__((visibility("default"))) int mcsim_config(const char* key, long value) {
    struct {
        const char* name;
        long* field;
    } keys[] = {{"max_threads", &config.max_threads},
                {"simd_width", &config.simd_width},
                {"group_memory", &config.group_memory},
                {"ignore_barriers", &config.ignore_barriers},
                {"reverse_concurrent", &config.reverse_concurrent}};
    if (!strcmp(key, "new_device")) {  // pipelines compiled afresh, under the settings now in force
        the_device = make<Device>(DeviceClass);
        the_device->refs = 1 << 30;
        return 0;
    }
    if (!strcmp(key, "plant_clear")) {
        plants().clear();
        return 0;
    }
    for (auto& k : keys)
        if (!strcmp(k.name, key)) {
            *k.field = value;
            return 0;
        }
    return -1;
}

// what the simulator found since the last call ("" when nothing); the
// caller frees it
__attribute__((visibility("default"))) char* mcsim_errors(void) {
    std::lock_guard<std::mutex> l(error_mu);
    std::string out = errors;
    if (error_count > 50) out += "(" + std::to_string(error_count - 50) + " more)\n";
    errors.clear();
    error_count = 0;
    return strdup(out.c_str());
}

}  // extern "C"

static Pipeline* copy_pipeline() {
    static Pipeline* p;
    if (p) return p;
    std::string err;
    auto prog = compile(
        "#include <metal_stdlib>\nusing namespace metal;\n"
        "kernel void mcsim_copy(device const ushort* src [[buffer(0)]], device ushort* dst [[buffer(1)]],\n"
        "                       constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {\n"
        "    if (i < n) dst[i] = src[i];\n}\n",
        &err);
    if (!prog) {
        fail("the host's copy kernel does not compile: %s", err.c_str());
        return nullptr;
    }
    p = make<Pipeline>(PipelineClass);
    p->program = prog;
    p->kernel = &prog->kernels.at("mcsim_copy");
    return p;
}

extern "C" void mcsim_host_copy(void* encoder, void* dst, unsigned long dst_offset, void* src, unsigned long src_offset,
                                unsigned long bytes) {
    Pipeline* p = copy_pipeline();
    if (!p || bytes == 0) return;
    Encoder* e = (Encoder*)encoder;
    if (e->host_written.count((Buffer*)src) || e->host_written.count((Buffer*)dst) || e->host_read.count((Buffer*)dst)) {
        enc_barrier(e, nullptr, 1);
        e->host_read.clear(), e->host_written.clear();
    }
    e->host_read.insert((Buffer*)src);
    e->host_written.insert((Buffer*)dst);
    enc_pipeline(e, nullptr, p);
    enc_buffer(e, nullptr, (Buffer*)src, src_offset, 0);
    enc_buffer(e, nullptr, (Buffer*)dst, dst_offset, 1);
    unsigned n = bytes / 2;
    enc_bytes(e, nullptr, &n, 4, 2);
    MTLSize g{(n + 31) / 32, 1, 1}, t{32, 1, 1};
    enc_dispatch(e, nullptr, g, t);
}

// one dispatch of kernel (from source) as a defective caller might make it:
// buffers 0..n-1 as given (nil included), bytes at bytes_index, the
// threadgroup memory length at index 0, one threadgroup of threads
extern "C" __attribute__((visibility("default"))) void mcsim_raw(void* encoder, const char* source, const char* kernel,
                                                                 void* const* buffers, int n, const void* bytes,
                                                                 unsigned long nbytes, int bytes_index,
                                                                 unsigned long group_memory, unsigned long threads) {
    std::string err;
    auto prog = compile(source, &err);
    if (!prog || !prog->kernels.count(kernel)) {
        fail("mcsim_raw: %s", prog ? "no such kernel" : err.c_str());
        return;
    }
    Pipeline* p = make<Pipeline>(PipelineClass);
    p->program = prog;
    p->kernel = &prog->kernels.at(kernel);
    Encoder* e = (Encoder*)encoder;
    enc_pipeline(e, nullptr, p);
    for (int i = 0; i < n; i++) enc_buffer(e, nullptr, (Buffer*)buffers[i], 0, i);
    if (bytes) enc_bytes(e, nullptr, bytes, nbytes, bytes_index);
    if (group_memory) enc_group_memory(e, nullptr, group_memory, 0);
    MTLSize g{1, 1, 1}, t{threads, 1, 1};
    enc_barrier(e, nullptr, 1);  // after the host's copies of its inputs
    enc_dispatch(e, nullptr, g, t);
}
