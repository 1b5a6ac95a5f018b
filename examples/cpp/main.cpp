// A C++ program linked against an installed metalcore (no dlopen): built by
// CMake's find_package(metalcore) and by pkg-config in `make test`.
#include <metalcore.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    const int expected = MC_VERSION_MAJOR * 10000 + MC_VERSION_MINOR * 100 + MC_VERSION_PATCH;
    if (mc_version() != expected) {
        std::fprintf(stderr, "library version %d, header %d\n", mc_version(), expected);
        return 1;
    }
    const int64_t rows = 3, cols = 100;
    std::vector<float> x(rows * cols), y(x.size()), w(cols, 2.0f);
    for (size_t i = 0; i < x.size(); i++) x[i] = std::sin(0.1f * static_cast<float>(i));
    int64_t shape[2] = {rows, cols}, wshape[1] = {cols};
    const mc_dtype f32 = {MC_DTYPE_FLOAT, 32, 1};
    const mc_device cpu = {MC_DEVICE_CPU, 0};
    mc_tensor tx = {x.data(), cpu, 2, f32, shape, nullptr, 0};
    mc_tensor ty = {y.data(), cpu, 2, f32, shape, nullptr, 0};
    mc_tensor tw = {w.data(), cpu, 1, f32, wshape, nullptr, 0};
    if (mc_rmsnorm_fwd(&tx, &tw, 1e-6f, &ty, nullptr, nullptr) != MC_OK) {
        std::fprintf(stderr, "%s\n", mc_last_error());
        return 1;
    }
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t c = 0; c < cols; c++) ss += double(x[r * cols + c]) * x[r * cols + c];
        const double rstd = 1 / std::sqrt(ss / cols + 1e-6);
        for (int64_t c = 0; c < cols; c++) {
            const double want = x[r * cols + c] * rstd * 2;
            if (std::fabs(y[r * cols + c] - want) > 1e-5 * (1 + std::fabs(want))) {
                std::fprintf(stderr, "y[%lld][%lld] = %g, want %g\n", (long long)r, (long long)c, y[r * cols + c], want);
                return 1;
            }
        }
    }
    std::printf("metalcore %s from C++: rmsnorm ok\n", mc_version_string());
    return 0;
}
