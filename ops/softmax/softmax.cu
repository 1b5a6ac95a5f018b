// Softmax over the last dimension: one block per row, but for the forward
// variant softmax_fwd_ahead, launched with as many blocks as fit the GPU at
// once, each taking every MC_NBLOCKS-th row and fetching its next row while
// it reduces and writes the current one.

// stores the n values of a piece at element s of q, of element type DO
// (DO may be wider than the input's: float32 output of 16-bit rows), whole
// vectors of DO when vec
template <class DO, int n> MC_DEVICE void softmax_store(typename DO::T* q, int cols, bool vec, int s, const float* val) {
    enum { M = Vec<DO>::N };
    if (vec) {
        if (s < cols)
            for (int h = 0; h < n; h += M) Vec<DO>::store(q + s + h, val + h);
        return;
    }
    for (int j = 0; j < n; j++)
        if (s + j < cols) DO::store(q + s + j, val[j]);
}

template <class D, class DO, bool ahead>
MC_DEVICE void softmax_rows(const void* x_, mc_i64 xs, void* y_, mc_i64 ys, int rows, int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_SHARED float red[33];
    const T* xb = (const T*)x_;
    Row<D, MC_CACHE> x;
    mc_for_rows<ahead>(rows, [&](mc_i64 r) {
        x.init(xb + r * xs, cols);
        float m = -__int_as_float(0x7f800000);
        x.load([&](float* v, int k) {
            int s = x.start(k);
            for (int j = 0; j < N; j++)
                if (s + j < cols) m = fmaxf(m, v[j]);
        });
        if constexpr (ahead) x.fetch_next(xb, xs, r, rows);
        m = mc_block_max(m, red);
        float sum = 0.f;
        x.each([&](float* v, int k) {
            int s = x.start(k);
            for (int j = 0; j < N; j++) {
                v[j] = s + j < cols ? expf(v[j] - m) : 0.f;  // cached pieces keep the exponentials
                sum += v[j];
            }
        });
        float inv = 1.f / mc_block_sum(sum, red);
        typename DO::T* y = (typename DO::T*)y_ + r * ys;
        bool yvec = mc_aligned(y, cols, N);
        x.each([&](float* v, int k) {
            float o[N];
            for (int j = 0; j < N; j++) o[j] = (k < MC_CACHE ? v[j] : expf(v[j] - m)) * inv;
            softmax_store<DO, N>(y, cols, yvec, x.start(k), o);
        });
    });
}
#define MC_SOFTMAX_FWD_PARAMS (const void* x, mc_i64 xs, void* y, mc_i64 ys, int rows, int cols)
#define MC_SOFTMAX_FWD_ARGS (x, xs, y, ys, rows, cols)
template <class D> __device__ void softmax_fwd MC_SOFTMAX_FWD_PARAMS { softmax_rows<D, D, false> MC_SOFTMAX_FWD_ARGS; }
template <class D> __device__ void softmax_fwd_ahead MC_SOFTMAX_FWD_PARAMS { softmax_rows<D, D, true> MC_SOFTMAX_FWD_ARGS; }
MC_INSTANTIATE(softmax_fwd, MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
MC_INSTANTIATE(softmax_fwd_ahead, MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
// float32 output of 16-bit rows (softmax(x, dtype=float32)); the _f32
// instances repeat softmax_fwd's
template <class D> __device__ void softmax_fwd_f32out MC_SOFTMAX_FWD_PARAMS { softmax_rows<D, F32, false> MC_SOFTMAX_FWD_ARGS; }
template <class D> __device__ void softmax_fwd_f32out_ahead MC_SOFTMAX_FWD_PARAMS { softmax_rows<D, F32, true> MC_SOFTMAX_FWD_ARGS; }
MC_INSTANTIATE(softmax_fwd_f32out, MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
MC_INSTANTIATE(softmax_fwd_f32out_ahead, MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)

// dx = y * (dy - sum(dy * y))
template <class D>
__device__ void softmax_bwd(const void* dy_, mc_i64 dys, const void* y_, mc_i64 ys, void* dx_, mc_i64 dxs, int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_SHARED float red[33];
    mc_i64 r = MC_BLOCK;
    Row<D, MC_CACHE> y;
    y.init((const T*)y_ + r * ys, cols);
    const T* dy = (const T*)dy_ + r * dys;
    bool dyvec = mc_aligned(dy, cols, N);
    float dot = 0.f;
    y.load([&](float* v, int k) {
        float d[N];
        mc_fetch<D>(dy, cols, dyvec, y.start(k), d);
        for (int j = 0; j < N; j++) dot += d[j] * v[j];
    });
    dot = mc_block_sum(dot, red);
    T* dx = (T*)dx_ + r * dxs;
    bool dxvec = mc_aligned(dx, cols, N);
    y.each([&](float* v, int k) {
        float d[N], o[N];
        mc_fetch<D>(dy, cols, dyvec, y.start(k), d); // dx may be dy: each piece is read before it is written
        for (int j = 0; j < N; j++) o[j] = v[j] * (d[j] - dot);
        mc_store<D>(dx, cols, dxvec, y.start(k), o);
    });
}
MC_INSTANTIATE(softmax_bwd, (const void* dy, mc_i64 dys, const void* y, mc_i64 ys, void* dx, mc_i64 dxs, int cols),
               (dy, dys, y, ys, dx, dxs, cols))
