#include "cpu_fast.h"
static int64_t never(const tg_tensor *, int) { return -1; }
const tg_cpu_fast tg_fast_cont = {never, nullptr}, tg_fast_cpy = {never, nullptr}, tg_fast_get_rows = {never, nullptr};
const tg_cpu_fast tg_fast_add = {never, nullptr}, tg_fast_mul = {never, nullptr}, tg_fast_scale = {never, nullptr}, tg_fast_swiglu = {never, nullptr};
const tg_cpu_fast tg_fast_silu = {never, nullptr}, tg_fast_sigmoid = {never, nullptr}, tg_fast_softplus = {never, nullptr};
const tg_cpu_fast tg_fast_rms_norm = {never, nullptr}, tg_fast_l2_norm = {never, nullptr}, tg_fast_softmax = {never, nullptr};
const tg_cpu_fast tg_fast_attention = {never, nullptr};
const tg_cpu_fast tg_fast_rope = {never, nullptr}, tg_fast_rope_kv_update = {never, nullptr}, tg_fast_delta_rule = {never, nullptr};
