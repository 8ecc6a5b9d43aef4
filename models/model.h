// model.h - toy decoder models on the public tinygml API: a llama and a
// hybrid of gated-delta-rule and attention layers, loaded from GGUF, with
// sessions that hold KV caches and recurrent states for a batch of sequences.
// Everything here uses tinygml.h only. See models/README.md for the file
// format (keys, tensor names, math).
#pragma once
#include <stdint.h>

#include <random>
#include <string>
#include <vector>

#include "tinygml.h"

namespace tgm {

enum class arch { llama, hybrid };

struct hparams {
    arch kind = arch::llama;
    std::string arch_name;  // "llama" or "tghybrid"
    int n_vocab = 0, n_ctx = 0, n_embd = 0, n_layer = 0, n_ff = 0;
    int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
    float rope_base = 10000.0f, rms_eps = 1e-5f;
    // hybrid only
    int attn_interval = 0;  // layer i is attention when (i + 1) % attn_interval == 0
    int ssm_hk = 0, ssm_hv = 0, ssm_dk = 0, ssm_dv = 0;
    int bos = 256, eos = 257;
    bool is_attention(int il) const { return kind == arch::llama || (il + 1) % attn_interval == 0; }
};

struct layer {
    tg_tensor *attn_norm = nullptr, *ffn_norm = nullptr;
    tg_tensor *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;           // attention
    tg_tensor *ssm_q = nullptr, *ssm_k = nullptr, *ssm_v = nullptr, *ssm_out = nullptr;  // delta rule
    tg_tensor *ssm_beta = nullptr, *ssm_alpha = nullptr, *ssm_dt_bias = nullptr;
    tg_tensor *ssm_neg_exp_a = nullptr;  // -exp(A_log), computed at load
    tg_tensor *ffn_gate = nullptr, *ffn_up = nullptr, *ffn_down = nullptr;
};

struct model {
    hparams hp;
    tg_backend *backend = nullptr;  // not owned
    tg_context *ctx = nullptr;      // weight metadata
    tg_buffer *buf = nullptr;       // weight storage on the backend (a mapped file's bytes, or a copy)
    tg_buffer *buf_derived = nullptr;  // with mmap on the CPU: the weights computed at load (-exp(A_log))
    tg_gguf *file = nullptr;        // with mmap on the CPU: the mapped file the weights are read from
    tg_tensor *tok_embd = nullptr, *out_norm = nullptr, *output = nullptr;
    std::vector<layer> layers;
    size_t weight_bytes = 0;
    uint64_t identity = 0;  // hash of hparams, tensor names/types/shapes and sampled weight bytes
};

struct load_options {
    // Map the file (tg_gguf_open_mmap) instead of reading it. On a host
    // backend (the CPU) the weights are then used in place from the map, read
    // only, with no copy: pages come from the page cache as they are first
    // touched, and the model keeps the map until model_free. On CUDA each
    // tensor is uploaded from the map in pieces of at most upload_piece bytes
    // (no host copy of the file) and the map is closed after the load.
    // false: read the whole file into memory first (--no-mmap), then copy.
    // A mapped file must not be truncated or rewritten in place while the
    // model lives (SIGBUS: models/README.md, tg_gguf_open_mmap).
    bool use_mmap = true;
    size_t upload_piece = (size_t)64 << 20;
};

// Load a model file onto backend be. NULL + tg_last_error() "[model_load] ..."
// for a bad file (the GGUF reader's checks) or impossible metadata.
model *model_load(const char *path, tg_backend *be, const load_options &opt = load_options());
void model_free(model *m);

// A forward graph built once for one batch shape and kept (session.cpp).
struct session_graph;

// What a session holds, chosen at session_new.
struct session_params {
    int n_seq = 1;         // sequences (slots), [1, 4096]
    int n_ctx = 0;         // positions per sequence, [1, model context]; 0: the model's context
    int n_ubatch = 0;      // most tokens of one sequence in one graph; 0: min(n_ctx, 512). A batch with
                           // more is run in rounds of n_ubatch. The KV caches get n_ubatch scratch rows
                           // per sequence for the padding of ragged batches (models/README.md).
    tg_type type_k = TG_TYPE_F32;      // K cache: F32, F16 or BF16
    tg_type type_v = TG_TYPE_F32;      // V cache
    tg_type type_state = TG_TYPE_F32;  // recurrent (delta-rule) states
    bool checkpoints = false;          // keep one recurrent-state checkpoint per sequence
                                       // (session_seq_checkpoint; one more state's memory)
};

// KV caches ({head_dim, n_head_kv, n_ctx + n_ubatch, n_seq} per attention
// layer) and recurrent states ({dk, dv, hv, n_seq} per delta layer) for n_seq
// sequences, persistent on the model's backend, in the session's types.
// Sequence q holds positions [0, n_past[q]), in order, and the token of each
// (tokens[q]).
//
// Forward graphs are built once per batch shape (first column, columns,
// padded tokens per column, padded logit rows; models/README.md) and reused:
// a step only writes its token ids, positions, padding masks and logit rows
// into the input slot (one tg_tensor_set) and computes the kept graph, so the
// CUDA backend can replay its captured launches. At most session_max_graphs
// shapes are kept (least recently used dropped).
struct session {
    const model *m = nullptr;
    int n_seq = 0, n_ctx = 0, n_ubatch = 0, n_rows = 0;  // n_rows = n_ctx + n_ubatch cache rows
    tg_type type_k = TG_TYPE_F32, type_v = TG_TYPE_F32, type_state = TG_TYPE_F32;
    tg_context *ctx = nullptr;
    tg_buffer *buf = nullptr;
    std::vector<tg_tensor *> k_cache, v_cache, state;  // per layer (NULL where not used)
    std::vector<tg_tensor *> snap;                     // per delta layer: the checkpointed states (or NULL)
    std::vector<int> snap_pos;                         // per sequence: its checkpoint's length, -1: none
    long long n_replayed = 0;                          // tokens re-evaluated by recurrent truncations
    // the input slot, I32: a graph of C columns and T padded tokens each reads
    // token ids [0, CT), positions [CT, 2CT), padding masks (0/1, hybrid)
    // [2CT, 3CT) and the flat indices of the logit rows [3CT, 3CT + R)
    tg_tensor *inputs = nullptr;
    tg_tensor *mask_table = nullptr;                    // F32 {1, 2} = {0, 1}: masks are get_rows of it
    std::vector<int> n_past;                            // tokens held per sequence
    std::vector<std::vector<int32_t>> tokens;           // those tokens, per sequence
    size_t state_bytes = 0;
    bool reuse_graphs = true;                           // false: build every step's graph anew (tests)
    std::vector<session_graph *> graphs;                // kept graphs, by batch shape
    uint64_t clock = 0;                                 // for least-recently-used eviction
};
constexpr int session_max_graphs = 8;

// NULL + tg_last_error() "[session_new] ..." for bad parameters or no memory.
session *session_new(const model *m, const session_params &p);
session *session_new(const model *m, int n_seq, int n_ctx);  // F32 caches, default n_ubatch
void session_free(session *s);
// Forget sequence seq: zero its caches' rows and its state, n_past = 0.
// Where the backend fails a write (a device error), the sequence's length is
// 0 anyway and the status says so ("[session_reset] ... zeroing its caches
// failed"); so for session_clear, session_seq_keep and the clean-up of a
// failed session_seq_rm / session_seq_cp (their messages say "now empty").
tg_status session_reset(session *s, int seq);
// Reserve the backend's compute buffer for the largest step this session
// will run: all n_seq sequences, min(T_max, n_ubatch) tokens each, logits of
// every token (tg_backend_reserve). Later steps never grow the buffer. Call
// it before the first evaluation (it may replace the buffer).
tg_status session_reserve(session *s, int T_max);

// A batch like llama_batch: token i belongs to sequence seq[i] at position
// pos[i] and wants its logits when logits[i]. Within a sequence the tokens
// must come in order and continue its history: the first at n_past[seq],
// the next at n_past[seq] + 1, ... Sequences may have any number of tokens.
struct batch {
    std::vector<int32_t> token, pos, seq;
    std::vector<uint8_t> logits;
    void add(int32_t tok, int32_t p, int32_t sq, bool want) {
        token.push_back(tok);
        pos.push_back(p);
        seq.push_back(sq);
        logits.push_back(want ? 1 : 0);
    }
    void clear() { token.clear(), pos.clear(), seq.clear(), logits.clear(); }
    int size() const { return (int)token.size(); }
};

// Evaluate a batch: one graph when no sequence has more than n_ubatch tokens
// in it (else rounds of n_ubatch). logits receives n_vocab floats for each
// token that wants them, in batch order. Results equal evaluating each
// sequence alone. Fails, changing nothing, for a bad token id, sequence,
// position or a context overflow (all checked first); a backend failure in a
// later round leaves the earlier rounds' tokens in their sequences.
tg_status session_decode(session *s, const batch &b, std::vector<float> *logits);

// Run T new tokens for each of the n sequences [seq0, seq0 + n): tokens[b*T + t]
// (a batch of n*T tokens). Positions continue each sequence's n_past. logits
// receives vocab floats per token, [b][t][vocab] when all_logits, else the
// last token's [b][vocab]. Fails (changing nothing) past the context length
// or for bad token ids.
tg_status session_eval(session *s, int seq0, int n, const int32_t *tokens, int T, bool all_logits,
                       std::vector<float> *logits);

// Sequence operations (llama.cpp's memory API). seq -1 means every sequence.
// seq_rm: remove positions [p0, p1) (p1 < 0: to the end). [p0, end) truncates
// to p0, [0, end) clears. A range inside the sequence cannot leave a hole
// (positions are cache rows): the tokens after it are evaluated again at
// positions p0, p0 + 1, ..., so the sequence is the one in which the removed
// tokens were never evaluated (llama.cpp's seq_rm followed by a seq_add that
// shifts the rest down, but recomputed rather than re-rotated; it costs the
// tail's evaluation). On a model with delta-rule layers a truncation
// re-evaluates the kept tokens from the sequence's checkpoint when it is at
// or before p0, else from a zero state (the recurrent state cannot be
// rewound; models/README.md). A backend failure while re-evaluating leaves
// that sequence empty (the error says so).
tg_status session_seq_rm(session *s, int seq, int p0, int p1);
// Checkpoint sequence seq's recurrent states at its current length (a
// session made with checkpoints; replaces the sequence's previous one). A
// later truncation to p0 >= that length restarts from here. Nothing to do
// (TG_OK) on a model without delta-rule layers.
tg_status session_seq_checkpoint(session *s, int seq);
// Copy sequence src (its cache rows, state, tokens) over sequence dst.
tg_status session_seq_cp(session *s, int src, int dst);
// Clear every sequence but seq.
tg_status session_seq_keep(session *s, int seq);
// Clear every sequence.
tg_status session_clear(session *s);

// State save and load (models/README.md, "State files"): the whole session
// (seq < 0) or one sequence, to memory or to a file. A state records the
// model's identity, the cache types, and per sequence its tokens, KV rows and
// recurrent states; it is versioned and checksummed. Loading checks all of it
// before it writes anything: a truncated, corrupted or foreign state (another
// model, other cache types, too long for this session) fails with
// TG_ERR_FORMAT "[session_state_load] ..." and the session is as before.
// Loading a whole-session state replaces every sequence (those it lacks are
// cleared); loading a sequence state writes only sequence dst.
tg_status session_state_save(session *s, int seq, std::vector<uint8_t> *out);
tg_status session_state_load(session *s, int dst, const uint8_t *data, size_t size);
// The _file save writes PATH.tmp-PID-N and renames it over path: a failed
// save (TG_ERR_IO) leaves the file that was there; a path that is not a
// regular file (FIFO, device, directory) is refused, never removed.
tg_status session_state_save_file(session *s, int seq, const char *path);
tg_status session_state_load_file(session *s, int dst, const char *path);
// Read a state file's bytes for session s (what session_state_load_file
// reads): a regular file of at most the largest state s can take (TG_ERR_IO
// for a FIFO, a device or a directory; TG_ERR_FORMAT for a larger file), so
// that a wrong path never reads without end. *out is written only on TG_OK.
tg_status session_state_read_file(const session *s, const char *path, std::vector<uint8_t> *out);
// Read only the token list of a one-sequence state after checking it (the
// CLI's prompt cache compares it to the new prompt).
tg_status session_state_tokens(const session *s, const uint8_t *data, size_t size, std::vector<int32_t> *tokens);
// The state format's checksum (FNV-1a 64 of the bytes before the trailer),
// for tests and the fuzzer that reseal edited states.
uint64_t state_checksum(const uint8_t *data, size_t size);
constexpr uint32_t state_version = 1;

// Byte-level tokenizer: bytes 0..255, BOS 256, EOS 257.
std::vector<int32_t> tokenize(const std::string &text, bool add_bos);
// The text of byte b's token in a "gpt2" vocabulary (GGUF tokenizer.ggml.tokens,
// as llama.cpp reads it): GPT-2's byte-to-unicode character for b, in UTF-8
// ("a" for 'a', "Ġ" U+0120 for ' ', "Ā" U+0100 for 0x00); "" outside 0..255.
std::string byte_token_text(int b);
std::string detokenize(int32_t token);  // "" for BOS/EOS

// The sampler chain of llama.cpp, with its defaults and in its order: the
// repetition penalty over the last repeat_last_n tokens of the history, then
// top-k, top-p, min-p, the temperature, and a draw. Below kMinTemp (or for a
// NaN temp) the draw is greedy: the largest logit after the penalty (logits /
// temp would overflow as temp nears 0). NaN and inf logits are never chosen;
// -1 when no logit is finite. The draw uses one rng() per sampled token and no
// library distribution, so a seed gives the same tokens on every platform.
struct sampler {
    static constexpr float kMinTemp = 1e-4f;
    float temp = 0.8f;            // below kMinTemp: greedy
    int top_k = 40;               // keep the k largest logits; <= 0: all
    float top_p = 0.95f;          // then the smallest prefix with probability >= top_p; >= 1: off
    float min_p = 0.05f;          // then the tokens with p >= min_p * p_max; <= 0: off
    float repeat_penalty = 1.0f;  // > 1 discourages repeats; 1: off (llama.cpp's penalty_repeat)
    int repeat_last_n = 64;       // history tokens the penalty looks at; 0: off, < 0: all
    std::mt19937_64 rng{1234};
    // history: the tokens so far (prompt included, as llama.cpp accepts them), oldest first
    int32_t sample(const float *logits, int n_vocab, const int32_t *history = nullptr, size_t n_history = 0);
    bool greedy() const { return !(temp >= kMinTemp); }
};

// The stages of sampler::sample, in chain order, on a list of candidates
// (exposed for tests). Each keeps at least one candidate of a non-empty list.
struct candidate {
    int32_t id;
    double logit;
};
// The finite logits of [0, n_vocab), in id order (none for NULL logits).
std::vector<candidate> sample_candidates(const float *logits, int n_vocab);
// llama.cpp's penalty_repeat: each candidate whose id is among the last
// last_n history tokens (< 0: all of them) gets logit / penalty when the
// logit is > 0, logit * penalty when <= 0 (once, however often it occurs).
// penalty 1, or not a positive finite number: no change.
void sample_penalty(std::vector<candidate> &c, const int32_t *history, size_t n_history, float penalty, int last_n);
// Sort by logit, largest first, ties by smaller id first; keep the first k
// (k <= 0 or k >= size: all).
void sample_top_k(std::vector<candidate> &c, int k);
// softmax(logits); keep the smallest prefix (in sample_top_k's order) whose
// probability sum reaches p. p >= 1: all.
void sample_top_p(std::vector<candidate> &c, float p);
// Keep the candidates with probability >= p * the largest probability. p <= 0:
// all; p > 1 acts as 1.
void sample_min_p(std::vector<candidate> &c, float p);
// Draw one id from softmax(logit / temp) of a non-empty list, with one rng()
// (-1 for an empty one). temp below sampler::kMinTemp or NaN: greedy, the
// largest logit (smallest id on ties), as the sampler.
int32_t sample_draw(const std::vector<candidate> &c, float temp, std::mt19937_64 &rng);
// Greedy without a penalty: the id of the largest finite logit of n, the
// smallest on ties; -1 when none is finite (n <= 0 or NULL logits included). SSE2 where the
// compiler targets it, else the portable scan (tested on every platform).
int32_t greedy_argmax(const float *logits, int n);
int32_t greedy_argmax_portable(const float *logits, int n);

}  // namespace tgm
