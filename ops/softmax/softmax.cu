// Softmax over the last dimension: one block per row, but for the forward
// variant softmax_fwd_ahead, launched with as many blocks as fit the GPU at
// once, each taking every MC_NBLOCKS-th row and fetching its next row while
// it reduces and writes the current one.

// stores the n values of a piece at element s of q, of element type DO
// (DO may be wider than the input's: float32 output of 16-bit rows; or
// narrower: the 16-bit gradient of float32 rows, four values, 8 bytes),
// whole vectors of DO when vec
template <class DO, int n>
MC_DEVICE void softmax_store(MC_GLOBAL typename DO::T* q, int cols, bool vec, int s, MC_THREAD const float* val) {
    enum { M = Vec<DO>::N };
    if (vec && n >= M) {
        if (s < cols)
            for (int h = 0; h < n; h += M) Vec<DO>::store(q + s + h, val + h);
        return;
    }
    if (vec && n * sizeof(typename DO::T) == 8) {
        if (s < cols) {
            uint2 raw;
            MC_THREAD typename DO::T* e = (MC_THREAD typename DO::T*)&raw;
            for (int j = 0; j < n; j++) e[j] = DO::pack(val[j]);
            *(MC_GLOBAL uint2*)(q + s) = raw;
        }
        return;
    }
    for (int j = 0; j < n; j++)
        if (s + j < cols) DO::store(q + s + j, val[j]);
}

// the row's largest value
template <class D> struct RowMax {
    enum { N = Vec<D>::N };
    int cols;
    float m;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) {
        for (int j = 0; j < N; j++)
            if (s + j < cols) m = fmaxf(m, v[j]);
    }
};
// y = exp(x - m) * inv: from the cached exponentials, recomputed past them
template <class D, class DO> struct SoftmaxWrite {
    enum { N = Vec<D>::N };
    float m, inv;
    MC_GLOBAL typename DO::T* y;
    int cols;
    bool yvec;
    MC_METHOD void operator()(MC_THREAD const float* v, int k, int s) const {
        float o[N];
        for (int j = 0; j < N; j++) o[j] = (k < MC_CACHE ? v[j] : expf(v[j] - m)) * inv;
        softmax_store<DO, N>(y, cols, yvec, s, o);
    }
};

template <class D, class DO, bool ahead> struct SoftmaxRows {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    MC_IDS;
    MC_GROUP float* red;
    MC_THREAD Row<D, MC_CACHE>& x;
    MC_GLOBAL const T* xb;
    mc_i64 xs;
    MC_GLOBAL typename DO::T* y;
    mc_i64 ys;
    int rows, cols;
    MC_METHOD void operator()(mc_i64 r) {
        x.init(xb + r * xs, cols);
        RowMax<D> max = {cols, -mc_inf()};
        mc_row_load(id, x, max);
        if (ahead) x.fetch_next(id, xb, xs, r, rows);
        Exponentials<D> e = {cols, mc_block_max(id, max.m, red), 0.f};
        mc_row_each(id, x, e);
        MC_GLOBAL typename DO::T* yr = y + r * ys;
        SoftmaxWrite<D, DO> out = {e.m, 1.f / mc_block_sum(id, e.sum, red), yr, cols, mc_aligned(yr, cols, N)};
        mc_row_each(id, x, out);
    }
};
template <class D, class DO, bool ahead>
MC_DEVICE void softmax_rows(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y,
                            mc_i64 ys, int rows, int cols) {
    Row<D, MC_CACHE> row;
    SoftmaxRows<D, DO, ahead> f = {id, red,  row, (MC_GLOBAL const typename D::T*)x, xs, (MC_GLOBAL typename DO::T*)y,
                                   ys, rows, cols};
    mc_for_rows<ahead>(id, rows, f);
}
#define MC_SOFTMAX_FWD_PARAMS (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y, mc_i64 ys, int rows, int cols)
#define MC_SOFTMAX_FWD_ARGS (x, xs, y, ys, rows, cols)
// NAME<D>: softmax_rows<D, OUT, AHEAD>
#define MC_SOFTMAX_FWD(NAME, OUT, AHEAD)                                                                               \
    template <class D>                                                                                                 \
    MC_DEVICE void NAME(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y, mc_i64 ys, \
                        int rows, int cols) {                                                                          \
        softmax_rows<D, OUT, AHEAD>(id, red, x, xs, y, ys, rows, cols);                                                \
    }
MC_SOFTMAX_FWD(softmax_fwd, D, false)
MC_SOFTMAX_FWD(softmax_fwd_ahead, D, true)
// float32 output of 16-bit rows (softmax(x, dtype=float32)); the _f32
// instances repeat softmax_fwd's
MC_SOFTMAX_FWD(softmax_fwd_f32out, F32, false)
MC_SOFTMAX_FWD(softmax_fwd_f32out_ahead, F32, true)
MC_INSTANTIATE_GROUP(softmax_fwd, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
MC_INSTANTIATE_GROUP(softmax_fwd_ahead, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
MC_INSTANTIATE_GROUP(softmax_fwd_f32out, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)
MC_INSTANTIATE_GROUP(softmax_fwd_f32out_ahead, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_FWD_PARAMS, MC_SOFTMAX_FWD_ARGS)

// Short rows, several a warp: a row of cols elements takes `lanes` threads
// (a power of two up to 32, at least its 16-byte pieces), each holding one
// piece in registers (more pieces a thread ran slower: fewer threads fit),
// read element by element where the row is not whole aligned pieces. A
// block's threads are its warps' groups in order; a warp's groups take
// consecutive rows and the warps the next ones, grid-stride, every lane of
// a warp running every step (its shuffles need them all: a group past the
// last row reads nothing and writes nothing).
template <class D, class DO>
MC_DEVICE void softmax_short_rows(MC_IDS, MC_GLOBAL const void* x_, mc_i64 xs, MC_GLOBAL void* y_, mc_i64 ys, int rows,
                                  int cols, int lanes) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    int per_block = MC_NTHREADS / lanes, s = MC_TID % lanes * N;
    mc_i64 step = (mc_i64)MC_NBLOCKS * per_block;
    for (mc_i64 r = MC_BLOCK * per_block + MC_TID / lanes; r - MC_TID % 32 / lanes < rows; r += step) {
        bool live = r < rows && s < cols;  // this lane has a piece of a row
        MC_GLOBAL const T* xr = (MC_GLOBAL const T*)x_ + (r < rows ? r : 0) * xs;
        float v[N];
        float m = -mc_inf();
        if (live) {
            mc_fetch<D>(xr, cols, mc_aligned(xr, cols, N), s, v);
            for (int j = 0; j < N; j++)
                if (s + j < cols) m = fmaxf(m, v[j]);
        }
        m = mc_group_max(m, lanes);
        float sum = 0.f;
        if (live)
            for (int j = 0; j < N; j++) {
                v[j] = s + j < cols ? expf(v[j] - m) : 0.f;
                sum += v[j];
            }
        sum = mc_group_sum(sum, lanes);
        if (!live) continue;
        float inv = 1.f / sum;
        for (int j = 0; j < N; j++) v[j] *= inv;
        MC_GLOBAL typename DO::T* yr = (MC_GLOBAL typename DO::T*)y_ + r * ys;
        softmax_store<DO, N>(yr, cols, mc_aligned(yr, cols, N), s, v);
    }
}
#define MC_SOFTMAX_SHORT_PARAMS \
    (MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y, mc_i64 ys, int rows, int cols, int lanes)
#define MC_SOFTMAX_SHORT_ARGS (x, xs, y, ys, rows, cols, lanes)
template <class D>
MC_DEVICE void softmax_fwd_short(MC_IDS, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y, mc_i64 ys, int rows,
                                 int cols, int lanes) {
    softmax_short_rows<D, D>(id, x, xs, y, ys, rows, cols, lanes);
}
template <class D>
MC_DEVICE void softmax_fwd_f32out_short(MC_IDS, MC_GLOBAL const void* x, mc_i64 xs, MC_GLOBAL void* y, mc_i64 ys,
                                        int rows, int cols, int lanes) {
    softmax_short_rows<D, F32>(id, x, xs, y, ys, rows, cols, lanes);
}
MC_INSTANTIATE(softmax_fwd_short, MC_SOFTMAX_SHORT_PARAMS, MC_SOFTMAX_SHORT_ARGS)
MC_INSTANTIATE(softmax_fwd_f32out_short, MC_SOFTMAX_SHORT_PARAMS, MC_SOFTMAX_SHORT_ARGS)

// dot = sum(dy * y)
template <class D> struct Dot {
    enum { N = Vec<D>::N };
    MC_GLOBAL const typename D::T* dy;
    int cols;
    bool dyvec;
    float dot;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) {
        float d[N];
        mc_fetch<D>(dy, cols, dyvec, s, d);
        for (int j = 0; j < N; j++) dot += d[j] * v[j];
    }
};
// dx = y * (dy - dot), dx of element type DO (D's, or 16-bit for float32
// rows); dx may be dy (of one type): each piece is read before it is written
template <class D, class DO> struct SoftmaxGrad {
    enum { N = Vec<D>::N };
    MC_GLOBAL const typename D::T* dy;
    MC_GLOBAL typename DO::T* dx;
    int cols;
    bool dyvec, dxvec;
    float dot;
    MC_METHOD void operator()(MC_THREAD const float* v, int, int s) const {
        float d[N], o[N];
        mc_fetch<D>(dy, cols, dyvec, s, d);
        for (int j = 0; j < N; j++) o[j] = v[j] * (d[j] - dot);
        softmax_store<DO, N>(dx, cols, dxvec, s, o);
    }
};

// dx = y * (dy - sum(dy * y))
template <class D, class DO>
MC_DEVICE void softmax_grad_row(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* dy_, mc_i64 dys,
                                MC_GLOBAL const void* y_, mc_i64 ys, MC_GLOBAL void* dx_, mc_i64 dxs, int cols) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    mc_i64 r = MC_BLOCK;
    Row<D, MC_CACHE> y;
    y.init((MC_GLOBAL const T*)y_ + r * ys, cols);
    MC_GLOBAL const T* dy = (MC_GLOBAL const T*)dy_ + r * dys;
    Dot<D> dot = {dy, cols, mc_aligned(dy, cols, N), 0.f};
    mc_row_load(id, y, dot);
    MC_GLOBAL typename DO::T* dx = (MC_GLOBAL typename DO::T*)dx_ + r * dxs;
    SoftmaxGrad<D, DO> grad = {dy, dx, cols, dot.dyvec, mc_aligned(dx, cols, N), mc_block_sum(id, dot.dot, red)};
    mc_row_each(id, y, grad);
}
// dx = y * (dy - sum(dy * y)) for short rows, laid out as
// softmax_short_rows lays them (dx may be dy: a lane reads its piece of
// both before it writes it)
template <class D, class DO>
MC_DEVICE void softmax_short_grad_rows(MC_IDS, MC_GLOBAL const void* dy_, mc_i64 dys, MC_GLOBAL const void* y_,
                                       mc_i64 ys, MC_GLOBAL void* dx_, mc_i64 dxs, int rows, int cols, int lanes) {
    typedef typename D::T T;
    enum { N = Vec<D>::N };
    int per_block = MC_NTHREADS / lanes, s = MC_TID % lanes * N;
    mc_i64 step = (mc_i64)MC_NBLOCKS * per_block;
    for (mc_i64 r = MC_BLOCK * per_block + MC_TID / lanes; r - MC_TID % 32 / lanes < rows; r += step) {
        bool live = r < rows && s < cols;
        mc_i64 at = r < rows ? r : 0;
        MC_GLOBAL const T* yr = (MC_GLOBAL const T*)y_ + at * ys;
        MC_GLOBAL const T* dyr = (MC_GLOBAL const T*)dy_ + at * dys;
        float y[N], d[N];
        float dot = 0.f;
        if (live) {
            mc_fetch<D>(yr, cols, mc_aligned(yr, cols, N), s, y);  // zeros past the row
            mc_fetch<D>(dyr, cols, mc_aligned(dyr, cols, N), s, d);
            for (int j = 0; j < N; j++) dot += d[j] * y[j];
        }
        dot = mc_group_sum(dot, lanes);
        if (!live) continue;
        for (int j = 0; j < N; j++) y[j] *= d[j] - dot;
        MC_GLOBAL typename DO::T* dxr = (MC_GLOBAL typename DO::T*)dx_ + r * dxs;
        softmax_store<DO, N>(dxr, cols, mc_aligned(dxr, cols, N), s, y);
    }
}
#define MC_SOFTMAX_SHORT_BWD_PARAMS                                                                            \
    (MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* y, mc_i64 ys, MC_GLOBAL void* dx, mc_i64 dxs, \
     int rows, int cols, int lanes)
#define MC_SOFTMAX_SHORT_BWD_ARGS (dy, dys, y, ys, dx, dxs, rows, cols, lanes)
template <class D>
MC_DEVICE void softmax_bwd_short(MC_IDS, MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* y, mc_i64 ys,
                                 MC_GLOBAL void* dx, mc_i64 dxs, int rows, int cols, int lanes) {
    softmax_short_grad_rows<D, D>(id, dy, dys, y, ys, dx, dxs, rows, cols, lanes);
}
template <class D>
MC_DEVICE void softmax_bwd_f32in_short(MC_IDS, MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* y, mc_i64 ys,
                                       MC_GLOBAL void* dx, mc_i64 dxs, int rows, int cols, int lanes) {
    softmax_short_grad_rows<F32, D>(id, dy, dys, y, ys, dx, dxs, rows, cols, lanes);
}
MC_INSTANTIATE(softmax_bwd_short, MC_SOFTMAX_SHORT_BWD_PARAMS, MC_SOFTMAX_SHORT_BWD_ARGS)
MC_INSTANTIATE(softmax_bwd_f32in_short, MC_SOFTMAX_SHORT_BWD_PARAMS, MC_SOFTMAX_SHORT_BWD_ARGS)

#define MC_SOFTMAX_BWD_PARAMS \
    (MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* y, mc_i64 ys, MC_GLOBAL void* dx, mc_i64 dxs, int cols)
#define MC_SOFTMAX_BWD_ARGS (dy, dys, y, ys, dx, dxs, cols)
template <class D>
MC_DEVICE void softmax_bwd(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* dy, mc_i64 dys, MC_GLOBAL const void* y,
                           mc_i64 ys, MC_GLOBAL void* dx, mc_i64 dxs, int cols) {
    softmax_grad_row<D, D>(id, red, dy, dys, y, ys, dx, dxs, cols);
}
// float32 dy and y, dx of D (the gradient of softmax(x, dtype=float32) for
// a 16-bit x, in x's dtype); the _f32 instance repeats softmax_bwd's
template <class D>
MC_DEVICE void softmax_bwd_f32in(MC_IDS, MC_GROUP float* red, MC_GLOBAL const void* dy, mc_i64 dys,
                                 MC_GLOBAL const void* y, mc_i64 ys, MC_GLOBAL void* dx, mc_i64 dxs, int cols) {
    softmax_grad_row<F32, D>(id, red, dy, dys, y, ys, dx, dxs, cols);
}
MC_INSTANTIATE_GROUP(softmax_bwd, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_BWD_PARAMS, MC_SOFTMAX_BWD_ARGS)
MC_INSTANTIATE_GROUP(softmax_bwd_f32in, MC_BLOCK_SUM_SCRATCH, , MC_SOFTMAX_BWD_PARAMS, MC_SOFTMAX_BWD_ARGS)
