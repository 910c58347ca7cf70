"""Real prompts from the bundled MuSiQue sample, for the engine checks and the engine benchmark.

Both compare hf and vLLM on the same chats; building them once here keeps the two comparisons
on identical inputs.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MUSIQUE = REPO / "resources/raw/musique/musique_train_100.jsonl"
FEW_SHOT = REPO / "resources/prompts/few-shot/multihop.txt"


def musique_chats(
    n_closed: int, n_context: int, max_doc_chars: int = 300
) -> tuple[list[str], list[list[dict]], tuple[str, ...]]:
    """Real prompts: MuSiQue sample questions in the few-shot multihop template.

    The first `n_closed` questions closed-book, the next `n_context` with their gold
    paragraphs as context (the oracle setting), cut like the workflow's default cut.
    Returns labels, chats and the template's stop strings.
    """
    from cqabench.data.datasets import musique
    from cqabench.generation.prompts import build_chat, load_template

    data = musique.load({"questions": MUSIQUE}, "train", limit=n_closed + n_context)
    template = load_template(FEW_SHOT)
    docs = {d.docid: {"title": d.title, "text": d.text, "kind": d.kind} for d in data.corpus}
    gold: dict[str, list[str]] = {}
    for q in data.qrels:
        if q.relevance > 0 and q.docid not in gold.setdefault(q.qid, []):
            gold[q.qid].append(q.docid)
    labels, chats = [], []
    for i, query in enumerate(data.queries):
        if i < n_closed:
            labels.append(f"closed:{query.qid}")
            chats.append(build_chat(template, query.question))
        else:
            labels.append(f"oracle:{query.qid}")
            context = [docs[d] for d in gold.get(query.qid, [])]
            chats.append(build_chat(template, query.question, context, max_doc_chars=max_doc_chars))
    return labels, chats, tuple(template.stop)
