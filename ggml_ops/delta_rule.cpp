// delta_rule.cpp - gated linear / gated delta-rule recurrence.
#include "ops.h"

// implemented in the signature-ops change
tg_tensor *tg_delta_rule(tg_context *ctx, tg_tensor *q, tg_tensor *k, tg_tensor *v, tg_tensor *g, tg_tensor *beta,
                         tg_tensor *state, const tg_delta_params *params) {
    TG_FAIL_NULL(TG_ERR_UNSUPPORTED, "[delta_rule] not implemented yet");
}
void tg_cpu_delta_rule(const tg_tensor *dst, int ith, int nth) {}
