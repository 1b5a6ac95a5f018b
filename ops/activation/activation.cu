// Elementwise activations over n contiguous elements: a grid-stride loop of
// 16-byte pieces when every pointer is 16-byte aligned, element by element
// otherwise (and for the last n % N elements).

// erf as x*P(x^2)/Q(x^2) on [-4, 4] (the CPU kernels' approximation,
// |error| < 1e-7): a dozen FMAs, cheaper than erff where the op is bound by
// arithmetic (16-bit data).
MC_DEVICE float mc_erf(float x) {
    x = fminf(fmaxf(x, -4.f), 4.f);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = fmaf(p, x2, 2.77068142495902e-08f);
    p = fmaf(p, x2, -2.10102402082508e-06f);
    p = fmaf(p, x2, -5.69250639462346e-05f);
    p = fmaf(p, x2, -7.34990630326855e-04f);
    p = fmaf(p, x2, -2.95459980854025e-03f);
    p = fmaf(p, x2, -1.60960333262415e-02f);
    float q = -1.45660718464996e-05f;
    q = fmaf(q, x2, -2.13374055278905e-04f);
    q = fmaf(q, x2, -1.68282697438203e-03f);
    q = fmaf(q, x2, -7.37332916720468e-03f);
    q = fmaf(q, x2, -1.42647390514189e-02f);
    return __fdividef(x * p, q);  // q is in [-2.4, -0.014]: the fast division is within 2 ulp
}

// gelu(erf) as h + h erf(x / sqrt2), h = x/2, in one FMA over the rounded
// erf: mc_erf rounds to exactly -1 at its clamp, so the result is 0 for
// large negative x and NaN at -inf, as PyTorch's (1 + erf contracted into
// an FMA kept erf's last bits: gelu(-1e10) was -39). The conformance suite's
// extreme inputs check it.
MC_DEVICE float gelu_erf_f(float x) {
    float h = 0.5f * x;
    return fmaf(h, mc_erf(x * 0.7071067811865476f), h);
}

// The tanh form as 0.5 x (1 + tanh(u)) = x sigmoid(2u), and its derivative
// through s = sigmoid(2u), 1 - s = e s (e = exp(-2u)) for u >= 0: no
// 1 + tanh(u) to cancel for negative x. s is exactly 0 where exp(-2u)
// overflows (2u < -88), so the products overflow to NaN exactly where
// PyTorch's do (x or x^2 infinite).
MC_DEVICE float gelu_u(float x) { return 0.7978845608028654f * (x + 0.044715f * x * x * x); }
MC_DEVICE float gelu_f(float x, int tanh_form) {
    if (tanh_form) return x / (1.f + expf(-2.f * gelu_u(x)));
    return gelu_erf_f(x);
}
MC_DEVICE float gelu_grad(float dy, float x, int tanh_form) {
    if (tanh_form) {
        float u2 = 2.f * gelu_u(x), e = expf(-u2);
        float s = u2 < -88.f ? 0.f : 1.f / (1.f + e), c = u2 < 0.f ? 1.f - s : e * s;
        return dy * (s + 2.f * x * s * c * (0.7978845608028654f * (1.f + 3.f * 0.044715f * x * x)));
    }
    return dy * (0.5f * (1.f + mc_erf(x * 0.7071067811865476f)) + x * __expf(-0.5f * x * x) * 0.3989422804014327f);
}
// gelu_grad (erf form) for 16-bit data, where the kernel is bound by its
// arithmetic: the erf comes from the exp(-x^2/2) the density needs anyway
// (Abramowitz and Stegun 7.1.26, |error| < 1.5e-7, far below 16-bit
// rounding), and the lower tail is taken as erfc itself, without cancellation.
MC_DEVICE float gelu_grad_16bit(float dy, float x) {
    float e = __expf(-0.5f * x * x);
    float t = __fdividef(1.f, fmaf(0.3275911f * 0.7071067811865476f, fabsf(x), 1.f));
    float p = 1.061405429f;
    p = fmaf(p, t, -1.453152027f);
    p = fmaf(p, t, 1.421413741f);
    p = fmaf(p, t, -0.284496736f);
    p = fmaf(p, t, 0.254829592f);
    float tail = 0.5f * p * t * e;  // Phi(-|x|)
    return dy * ((x < 0.f ? tail : 1.f - tail) + x * e * 0.3989422804014327f);
}
// The fast exponential and division (a few ulp) keep the 16-bit cases
// bound by memory rather than by the IEEE division's instruction count.
MC_DEVICE float sigmoid_f(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
MC_DEVICE float silu_f(float x) { return x * sigmoid_f(x); }
MC_DEVICE float silu_grad(float dy, float x) {
    float s = sigmoid_f(x);
    return dy * s * (1.f + x * (1.f - s));
}

// apply f(a[i], b[i]) -> out[i] for i < n (b may be null); f is a function
// object of two floats
template <class D, class F>
MC_DEVICE void elementwise(MC_IDS, MC_GLOBAL const void* a_, MC_GLOBAL const void* b_, MC_GLOBAL void* out_, mc_i64 n,
                           F f) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_GLOBAL const T* a = (MC_GLOBAL const T*)a_;
    MC_GLOBAL const T* b = (MC_GLOBAL const T*)b_;
    MC_GLOBAL T* out = (MC_GLOBAL T*)out_;
    mc_i64 stride = MC_NBLOCKS * MC_NTHREADS, first = MC_BLOCK * MC_NTHREADS + MC_TID;
    bool vec = ((mc_u64)a % 16 | (mc_u64)out % 16 | (mc_u64)b % 16) == 0;
    mc_i64 done = 0;
    if (vec) {
        mc_i64 pieces = n / N;
        for (mc_i64 p = first; p < pieces; p += stride) {
            float av[N], bv[N], o[N];
            Vec<D>::load(a + p * N, av);
            if (b) Vec<D>::load(b + p * N, bv);
            for (int j = 0; j < N; j++) o[j] = f(av[j], b ? bv[j] : 0.f);
            Vec<D>::store(out + p * N, o);
        }
        done = pieces * N;
    }
    for (mc_i64 i = done + first; i < n; i += stride) D::store(out + i, f(D::load(a + i), b ? D::load(b + i) : 0.f));
}

// The activations as function objects: (x, unused) forward, (dy, x) backward.
struct GeluErf {
    MC_METHOD float operator()(float v, float) const { return gelu_f(v, 0); }
};
struct GeluTanh {
    MC_METHOD float operator()(float v, float) const { return gelu_f(v, 1); }
};
struct GeluErfGrad {
    MC_METHOD float operator()(float d, float v) const { return gelu_grad(d, v, 0); }
};
struct GeluErfGrad16 {
    MC_METHOD float operator()(float d, float v) const { return gelu_grad_16bit(d, v); }
};
struct GeluTanhGrad {
    MC_METHOD float operator()(float d, float v) const { return gelu_grad(d, v, 1); }
};
struct Silu {
    MC_METHOD float operator()(float v, float) const { return silu_f(v); }
};
struct SiluGrad {
    MC_METHOD float operator()(float d, float v) const { return silu_grad(d, v); }
};
// The erf form's gradient of 16-bit data takes gelu_grad_16bit.
template <class D> struct GeluErfGradOf { typedef GeluErfGrad F; };
template <> struct GeluErfGradOf<F16> { typedef GeluErfGrad16 F; };
template <> struct GeluErfGradOf<BF16> { typedef GeluErfGrad16 F; };

// One kernel per activation and form (a kernel's registers are those of its
// most demanding path, so the erf form's do not pay for the tanh form's):
// NAME<D> applies F over n elements of one input (x) or two (dy, x).
#define MC_ACTIVATION_FWD(NAME, F)                                                                         \
    template <class D> MC_DEVICE void NAME(MC_IDS, MC_GLOBAL const void* x, MC_GLOBAL void* y, mc_i64 n) { \
        elementwise<D>(id, x, 0, y, n, F());                                                               \
    }
#define MC_ACTIVATION_BWD(NAME, F)                                                                                 \
    template <class D>                                                                                             \
    MC_DEVICE void NAME(MC_IDS, MC_GLOBAL const void* dy, MC_GLOBAL const void* x, MC_GLOBAL void* dx, mc_i64 n) { \
        elementwise<D>(id, dy, x, dx, n, F());                                                                     \
    }
MC_ACTIVATION_FWD(gelu_fwd, GeluErf)
MC_ACTIVATION_FWD(gelu_tanh_fwd, GeluTanh)
MC_ACTIVATION_BWD(gelu_bwd, typename GeluErfGradOf<D>::F)
MC_ACTIVATION_BWD(gelu_tanh_bwd, GeluTanhGrad)
MC_ACTIVATION_FWD(silu_fwd, Silu)
MC_ACTIVATION_BWD(silu_bwd, SiluGrad)
#define MC_ACTIVATION_FWD_PARAMS (MC_GLOBAL const void* x, MC_GLOBAL void* y, mc_i64 n)
#define MC_ACTIVATION_BWD_PARAMS (MC_GLOBAL const void* dy, MC_GLOBAL const void* x, MC_GLOBAL void* dx, mc_i64 n)
MC_INSTANTIATE(gelu_fwd, MC_ACTIVATION_FWD_PARAMS, (x, y, n))
MC_INSTANTIATE(gelu_tanh_fwd, MC_ACTIVATION_FWD_PARAMS, (x, y, n))
MC_INSTANTIATE(gelu_bwd, MC_ACTIVATION_BWD_PARAMS, (dy, x, dx, n))
MC_INSTANTIATE(gelu_tanh_bwd, MC_ACTIVATION_BWD_PARAMS, (dy, x, dx, n))
MC_INSTANTIATE(silu_fwd, MC_ACTIVATION_FWD_PARAMS, (x, y, n))
MC_INSTANTIATE(silu_bwd, MC_ACTIVATION_BWD_PARAMS, (dy, x, dx, n))

// The gated activations of an MLP: y = act(g) u, and the gradients
// dg = act'(g) dy u, du = act(g) dy, each over n contiguous elements.
struct SwiGlu {
    MC_METHOD float operator()(float g, float u) const { return silu_f(g) * u; }
};
template <int T> struct GeGlu {
    MC_METHOD float operator()(float g, float u) const { return gelu_f(g, T) * u; }
};
struct SiluAct {
    MC_METHOD float f(float x) const { return silu_f(x); }
    MC_METHOD float grad(float d, float x) const { return silu_grad(d, x); }
};
template <int T> struct GeluAct {
    MC_METHOD float f(float x) const { return gelu_f(x, T); }
    MC_METHOD float grad(float d, float x) const { return gelu_grad(d, x, T); }
};

// (dg, du) from (dy, g, u); dg may be g and du may be u: each piece is read
// before it is written
template <class D, class A>
MC_DEVICE void gated_grad(MC_IDS, MC_GLOBAL const void* dy_, MC_GLOBAL const void* g_, MC_GLOBAL const void* u_,
                          MC_GLOBAL void* dg_, MC_GLOBAL void* du_, mc_i64 n, A act) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_GLOBAL const T* dy = (MC_GLOBAL const T*)dy_;
    MC_GLOBAL const T* g = (MC_GLOBAL const T*)g_;
    MC_GLOBAL const T* u = (MC_GLOBAL const T*)u_;
    MC_GLOBAL T* dg = (MC_GLOBAL T*)dg_;
    MC_GLOBAL T* du = (MC_GLOBAL T*)du_;
    mc_i64 stride = MC_NBLOCKS * MC_NTHREADS, first = MC_BLOCK * MC_NTHREADS + MC_TID;
    bool vec = ((mc_u64)dy % 16 | (mc_u64)g % 16 | (mc_u64)u % 16 | (mc_u64)dg % 16 | (mc_u64)du % 16) == 0;
    mc_i64 done = 0;
    if (vec) {
        mc_i64 pieces = n / N;
        for (mc_i64 p = first; p < pieces; p += stride) {
            float d[N], gv[N], uv[N], og[N], ou[N];
            Vec<D>::load(dy + p * N, d);
            Vec<D>::load(g + p * N, gv);
            Vec<D>::load(u + p * N, uv);
            for (int j = 0; j < N; j++) {
                og[j] = act.grad(d[j] * uv[j], gv[j]);
                ou[j] = act.f(gv[j]) * d[j];
            }
            Vec<D>::store(dg + p * N, og);
            Vec<D>::store(du + p * N, ou);
        }
        done = pieces * N;
    }
    for (mc_i64 i = done + first; i < n; i += stride) {
        float d = D::load(dy + i), gi = D::load(g + i), ui = D::load(u + i);
        D::store(dg + i, act.grad(d * ui, gi));
        D::store(du + i, act.f(gi) * d);
    }
}

#define MC_GLU_FWD(NAME, F)                                                                                      \
    template <class D>                                                                                           \
    MC_DEVICE void NAME(MC_IDS, MC_GLOBAL const void* g, MC_GLOBAL const void* u, MC_GLOBAL void* y, mc_i64 n) { \
        elementwise<D>(id, g, u, y, n, F());                                                                     \
    }
#define MC_GLU_BWD(NAME, A)                                                                                 \
    template <class D>                                                                                      \
    MC_DEVICE void NAME(MC_IDS, MC_GLOBAL const void* dy, MC_GLOBAL const void* g, MC_GLOBAL const void* u, \
                        MC_GLOBAL void* dg, MC_GLOBAL void* du, mc_i64 n) {                                 \
        gated_grad<D>(id, dy, g, u, dg, du, n, A());                                                        \
    }
MC_GLU_FWD(swiglu_fwd, SwiGlu)
MC_GLU_FWD(geglu_fwd, GeGlu<0>)
MC_GLU_FWD(geglu_tanh_fwd, GeGlu<1>)
MC_GLU_BWD(swiglu_bwd, SiluAct)
MC_GLU_BWD(geglu_bwd, GeluAct<0>)
MC_GLU_BWD(geglu_tanh_bwd, GeluAct<1>)
#define MC_GLU_FWD_PARAMS (MC_GLOBAL const void* g, MC_GLOBAL const void* u, MC_GLOBAL void* y, mc_i64 n)
#define MC_GLU_BWD_PARAMS                                                                            \
    (MC_GLOBAL const void* dy, MC_GLOBAL const void* g, MC_GLOBAL const void* u, MC_GLOBAL void* dg, \
     MC_GLOBAL void* du, mc_i64 n)
MC_INSTANTIATE(swiglu_fwd, MC_GLU_FWD_PARAMS, (g, u, y, n))
MC_INSTANTIATE(geglu_fwd, MC_GLU_FWD_PARAMS, (g, u, y, n))
MC_INSTANTIATE(geglu_tanh_fwd, MC_GLU_FWD_PARAMS, (g, u, y, n))
MC_INSTANTIATE(swiglu_bwd, MC_GLU_BWD_PARAMS, (dy, g, u, dg, du, n))
MC_INSTANTIATE(geglu_bwd, MC_GLU_BWD_PARAMS, (dy, g, u, dg, du, n))
MC_INSTANTIATE(geglu_tanh_bwd, MC_GLU_BWD_PARAMS, (dy, g, u, dg, du, n))
