"""Bench training steps at batch sizes where a TPU's MXUs are kept busy (for `hloc bench
tpu`): the same models as ../shared/xla-oracle/bench_cases.py, larger batches.

    python ../shared/xla-oracle/gen_corpus.py target/tpu-batch --set tpu-batch \
        --cases-file tools/tpu_batch_cases.py --no-tol-estimate

An MXU pass streams the batch through weights held in the array, so a matmul is
compute-bound on v4 only when each weight byte meets ~230 FLOPs (275 TFLOP/s over
1.2 TB/s): batch x tokens in the thousands."""
SEED = 1009


def register(g):
    g.add_cfg('train_mlp_sgd', 'tpu-batch', dict(sizes=(784, 1024, 10), b=4096))
    g.add_cfg('train_mlp_adam', 'tpu-batch', dict(sizes=(784, 512, 512, 10), b=4096))
    g.add_cfg('train_mlp_bf16', 'tpu-batch', dict(sizes=(784, 1024, 10), b=4096))
    g.add_cfg('train_cnn_sgd', 'tpu-batch', dict(n=256, hw=32, cin=3, c1=32, c2=64, ncls=10))
    g.add_cfg('train_transformer_sgd', 'tpu-batch', dict(vocab=512, t=128, d=256, heads=8, ff=1024, layers=2, b=64))
    g.add_cfg('train_transformer_bf16', 'tpu-batch', dict(vocab=512, t=128, d=256, heads=8, ff=1024, layers=2, b=64))
