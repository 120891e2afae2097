"""Fine tags of segments packed between ";" gaps, as the pipeline's tagger gives them: through
`nlp.pipe` on packed Docs (tag_packed: any pipeline, the reference) or by the tagger's own layers
run directly (SegmentTagger: same tags, about a third of the cost).

A token's tag depends only on the 4 tokens either side, so each segment is tagged as if between ";"
gaps, each distinct word is embedded once, and each layer computes each distinct window of the
rows the tags still depend on once (identical rows in, identical rows out). Same layers, same
row inputs, so the same tags as `nlp.pipe` on the packed Docs. Its encoder's matrix products go
through numpy's BLAS (a few times faster than spaCy's BLIS here), and words whose two best tags
nearly tie are tagged again with the pipeline's own arithmetic, so the different rounding never
changes a tag. This is spaCy's tok2vec + tagger network redone in numpy, apart from
segment_tagger.py (which segments, in which threads, with which POS and lemmas), which uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc

_GAP = (";",) * 4
"""Between packed segments: as wide as the tagger's receptive field (4 window-1 CNN layers), so a
segment's tags never depend on its neighbours, and a device tagged alone or in a backfill of all
devices gets the same mentions. Semicolons tag isolated fragments best: nouns, acronyms and
participles as in running text."""
TIE_MARGIN = 1e-3
"""A word whose two best tag scores (the tagger's softmax layer outputs, unnormalised at
inference) are closer than this is tagged again with the pipeline's own arithmetic
(SegmentTagger): numpy's and BLIS's matrix products sum in different orders, and on the
benchmark corpus their scores differ by < 1e-5, so only a near tie could flip."""


def tag_packed(keys: Sequence[tuple[str, ...]], nlp: Language, n_process: int,
               per_doc: int) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Fine tags through `nlp.pipe` on packed Docs (any pipeline; SegmentTagger's reference)."""
    from spacy.tokens import Doc

    def packed() -> Iterator[Doc]:
        for s in range(0, len(keys), per_doc):
            words: list[str] = list(_GAP)
            for key in keys[s:s + per_doc]:
                words.extend(key)
                words.extend(_GAP)
            yield Doc(nlp.vocab, words=words)

    off = [p for p in nlp.pipe_names if p not in ("tok2vec", "tagger")]
    raw: dict[tuple[str, ...], tuple[str, ...]] = {}
    chunks = (keys[s:s + per_doc] for s in range(0, len(keys), per_doc))
    for batch, doc in zip(chunks, nlp.pipe(packed(), batch_size=8, disable=off, n_process=n_process), strict=True):
        tags = [t.tag_ for t in doc]
        pos = len(_GAP)
        for key in batch:
            raw[key] = tuple(tags[pos:pos + len(key)])
            pos += len(key) + len(_GAP)
    return raw


@dataclass(frozen=True)
class PreparedSegments:
    """Segments ready for the layers: their words as rows of the tagger's embedding table (`rows`
    per word of `ids`), the words first seen here in `new` (a Doc, embedded by `run`)."""

    lengths: np.ndarray
    ids: np.ndarray
    rows: list[int]
    gap_id: int
    new: Doc | None
    vocab: list[str]  # the job's distinct words: `ids` index it


class SegmentTagger:
    """The pipeline's tok2vec + tagger layers run on segments as if each sat between ";" gaps.

    Same layers, same inputs per row, so the same tags as `tag_packed`, but (1) each distinct
    word is embedded once (the embedding of a token depends on its own lexical features only),
    (2) layer k of the window-1 encoder computes a row only if the tags can still depend on it
    (within 4 - k of a segment word), and each distinct window of values once (a gap row whose
    window holds only ";" is one such window; so are repeated word n-grams), (3) the encoder's
    matrix products go through numpy (one OpenBLAS thread: ~3.5x BLIS's speed on the benchmark
    machine), and the segments of words with a near tie (TIE_MARGIN) are tagged again with the
    pipeline's own layers, so the rounding of the faster products never changes a tag.
    `prepare` reads spaCy's vocab (calling thread only); `run` is thinc and numpy only.
    """

    def __init__(self, nlp: Language, embed, blocks: list, softmax, labels: Sequence[str]) -> None:
        self.nlp, self.embed, self.blocks, self.softmax = nlp, embed, blocks, softmax
        self.fast_blocks = [_FastBlock.of(block, embed.get_dim("nO")) or _with_numpy_products(block)
                            for block in blocks]
        self.labels = list(labels)
        self.width = embed.get_dim("nO")
        self._row: dict[str, int] = {}
        self._vectors: list[np.ndarray] = []  # embedding rows, appended by `run` in `_row` order

    @classmethod
    def of(cls, nlp: Language) -> SegmentTagger | None:
        """A tagger for `nlp` if its tagger is a softmax over a shared window-1 MaxoutWindowEncoder
        tok2vec of `len(_GAP)` layers (en_core_web_sm's); else None (use `tag_packed`)."""
        try:
            if "tok2vec" not in nlp.pipe_names or "tagger" not in nlp.pipe_names:
                return None
            # spaCy types a component as a bare callable; a wrong guess is an AttributeError below
            tagger: Any = nlp.get_pipe("tagger")
            model = tagger.model
            listener = model.get_ref("tok2vec")
            if type(listener).__name__ != "Tok2VecListener" or getattr(listener, "upstream_name", None) != "tok2vec":
                return None
            if model.layers[1].name != "with_array(softmax)" or model.get_ref("softmax").attrs.get(
                    "softmax_temperature", 1.0) != 1.0:
                return None
            tok2vec: Any = nlp.get_pipe("tok2vec")
            t2v = tok2vec.model
            embed, encode = t2v.get_ref("embed"), t2v.get_ref("encode")
            if t2v.layers != [embed, encode] or encode.name.split("(", 1)[0] != "with_array":
                return None
            blocks = []
            for res in encode.layers[0].layers:
                window, block = res.layers[0].layers
                if res.name.split("(", 1)[0] != "residual" or window.name != "expand_window" or \
                        window.attrs.get("window_size") != 1 or block.get_dim("nO") != embed.get_dim("nO"):
                    return None
                blocks.append(block)
            if len(blocks) != len(_GAP):
                return None
            return cls(nlp, embed, blocks, model.get_ref("softmax"), tagger.labels)
        except (AttributeError, KeyError, ValueError, IndexError, TypeError):
            return None

    def prepare(self, keys: Sequence[tuple[str, ...]]) -> PreparedSegments:
        """Calling thread: the job's words, with a Doc of those not embedded yet (spaCy's vocab)."""
        from spacy.tokens import Doc

        gap = _GAP[0]
        vocab = list(dict.fromkeys([gap, *(w for key in keys for w in key)]))
        new = [w for w in vocab if w not in self._row]
        for w in new:
            self._row[w] = len(self._row)
        local = {w: i for i, w in enumerate(vocab)}
        lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=len(keys))
        ids = np.fromiter((local[w] for k in keys for w in k), dtype=np.int64, count=int(lengths.sum()))
        return PreparedSegments(lengths, ids, [self._row[w] for w in vocab], local[gap],
                    Doc(self.nlp.vocab, words=new) if new else None, vocab)

    def run(self, job: PreparedSegments, chunk: int = 8192) -> np.ndarray:
        """Tag ids (label indices) of every word of the job's segments, in order. Jobs run in the
        order they were prepared, one at a time (one thread calls BLIS at a time)."""
        if job.new is not None:  # each row depends on its own word only
            self._vectors.extend(self.embed.predict([job.new])[0])
        emb = np.stack([self._vectors[r] for r in job.rows]).astype("float32", copy=False)
        out = []
        starts = np.concatenate([[0], np.cumsum(job.lengths)])
        with _one_blas_thread():
            first = self.fast_blocks[0]
            # the first layer's products of every word of the job, once for all its chunks
            products = first.products(emb) if isinstance(first, _FastBlock) else None
            for s in range(0, len(job.lengths), chunk):
                e = min(s + chunk, len(job.lengths))
                out.append(self._tag_exactly(job.lengths[s:e], job.ids[starts[s]:starts[e]], emb, job.gap_id,
                                             products))
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def _tag_exactly(self, lengths: np.ndarray, ids: np.ndarray, emb: np.ndarray, gap_id: int,
                     products: np.ndarray | None = None) -> np.ndarray:
        """Tag ids through the fast layers, the segments of near ties again through the pipeline's."""
        guesses, margin = self._tag_chunk(lengths, ids, emb, gap_id, self.fast_blocks, products)
        near = margin < TIE_MARGIN
        if near.any():
            segment = np.repeat(np.arange(lengths.size), lengths)
            again = np.isin(segment, segment[near])
            guesses[again] = self._tag_chunk(lengths[np.unique(segment[near])], ids[again], emb, gap_id,
                                             self.blocks)[0]
        return guesses

    def labels_of(self, keys: Sequence[tuple[str, ...]],
                  guesses: np.ndarray) -> dict[tuple[str, ...], tuple[str, ...]]:
        labels = self.labels
        tags = [labels[g] for g in guesses.tolist()]
        out: dict[tuple[str, ...], tuple[str, ...]] = {}
        i = 0
        for key in keys:
            out[key] = tuple(tags[i:i + len(key)])
            i += len(key)
        return out

    def tag(self, keys: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], tuple[str, ...]]:
        """Fine tags of every key."""
        return self.labels_of(keys, self.run(self.prepare(keys))) if keys else {}

    def _tag_chunk(self, lengths: np.ndarray, ids: np.ndarray, emb: np.ndarray, gap_id: int,
                   blocks: list, products: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Tag ids of the words of `lengths.size` segments laid out as gap, key 1, gap, ..., key n,
        gap, and the margin between each word's two best tag scores. A row's value at layer k is
        a function of its window's values at layer k - 1, so each layer computes each distinct
        window once (identical rows in, identical rows out), and only for rows within 4 - k of a
        segment word, the rows the tags still depend on."""
        g = len(_GAP)
        width = self.width
        n = g + ids.size + g * lengths.size
        word_rows = np.arange(ids.size) + g + g * np.repeat(np.arange(lengths.size), lengths)
        value = np.full(n, gap_id, dtype=np.int64)  # row -> row of `table`, the layer's distinct values
        value[word_rows] = ids
        dist = np.full(n, g, dtype=np.int64)  # distance to the nearest segment word, capped at g
        dist[word_rows] = 0
        for d in range(1, g):
            for near in (word_rows - d, word_rows + d):  # in range: the gaps at both ends
                dist[near] = np.minimum(dist[near], d)
        table = emb
        for k, block in enumerate(blocks, 1):
            rows = np.flatnonzero(dist <= g - k)
            windows = np.stack([value[rows - 1], value[rows], value[rows + 1]], axis=1)
            m = table.shape[0]
            if m ** 3 < 2 ** 62:
                uniq, inverse = np.unique((windows[:, 0] * m + windows[:, 1]) * m + windows[:, 2], return_inverse=True)
                left, mid, right = uniq // (m * m), uniq // m % m, uniq % m
            else:
                distinct, inverse = np.unique(windows, axis=0, return_inverse=True)
                left, mid, right = distinct[:, 0], distinct[:, 1], distinct[:, 2]
            if isinstance(block, _FastBlock):
                out = block.windows(table, left, mid, right, products if k == 1 else None)
            else:
                X = np.empty((left.size, 3 * width), dtype="float32")
                X[:, :width] = table[left]
                X[:, width:2 * width] = table[mid]
                X[:, 2 * width:] = table[right]
                out = block.predict(X)
            table = table[mid] + out  # residual
            value[rows] = inverse.reshape(-1)
        final = value[word_rows]  # at layer 4 every row of `table` is a segment word
        probs = self.softmax.predict(table)
        if probs.shape[1] > 1:
            top2 = np.partition(probs, -2, axis=1)[:, -2:]
            margin = top2[:, 1] - top2[:, 0]
        else:
            margin = np.full(len(probs), np.inf)
        return probs.argmax(axis=1)[final], margin[final]


class _FastBlock:
    """One encoder layer (maxout >> layernorm, dropout off at inference) in numpy arithmetic.

    The maxout's pieces are laid out piece by piece (so the max runs over contiguous blocks),
    and a window's product splits into its three rows' products (left, middle, right): when a
    layer has fewer distinct input rows than distinct windows (the first layer: distinct words
    vs. distinct word trigrams), each row is multiplied once and the windows sum three rows of
    products. Only the order of the sums differs from thinc's layers (see TIE_MARGIN).
    """

    def __init__(self, W: np.ndarray, b: np.ndarray, G: np.ndarray, shift: np.ndarray, n_pieces: int) -> None:
        self.W, self.b, self.G, self.shift, self.n_pieces = W, b, G, shift, n_pieces
        self.n_out = G.shape[0]
        width = W.shape[0] // 3
        self.split = np.ascontiguousarray(np.concatenate([W[i * width:(i + 1) * width] for i in range(3)], axis=1))

    @classmethod
    def of(cls, block, width: int) -> _FastBlock | None:
        """A fast copy of a `maxout>>layernorm>>dropout` block over windows of 3 rows of `width`."""
        try:
            layers = {node.name: node for node in block.walk()}
            maxout, norm = layers["maxout"], layers["layernorm"]
            if block.name != "maxout>>layernorm>>dropout" or maxout.attrs.get("normalize", False):
                return None
            n_out, n_pieces, n_in = maxout.get_dim("nO"), maxout.get_dim("nP"), maxout.get_dim("nI")
            if n_in != 3 * width or norm.get_dim("nI") != n_out:
                return None
            W = np.asarray(maxout.get_param("W"), dtype="float32").reshape(n_out, n_pieces, n_in)
            b = np.asarray(maxout.get_param("b"), dtype="float32").reshape(n_out, n_pieces)
            return cls(np.ascontiguousarray(W.transpose(1, 0, 2).reshape(n_pieces * n_out, n_in).T),
                       np.ascontiguousarray(b.T.reshape(-1)), np.asarray(norm.get_param("G"), dtype="float32"),
                       np.asarray(norm.get_param("b"), dtype="float32"), n_pieces)
        except (AttributeError, KeyError, ValueError, TypeError):
            return None

    def products(self, rows: np.ndarray) -> np.ndarray:
        """Each row's products as the left, middle and right row of a window, side by side."""
        return rows @ self.split

    def windows(self, table: np.ndarray, left: np.ndarray, mid: np.ndarray, right: np.ndarray,
                products: np.ndarray | None = None) -> np.ndarray:
        """The layer's output for the windows (table[left], table[mid], table[right])."""
        width, wide = table.shape[1], self.W.shape[1]
        if products is None and 2 * table.shape[0] < left.size:
            products = self.products(table)
        if products is not None:
            Y = products[left, :wide] + products[mid, wide:2 * wide]
            Y += products[right, 2 * wide:]
        else:
            X = np.empty((left.size, 3 * width), dtype="float32")
            X[:, :width] = table[left]
            X[:, width:2 * width] = table[mid]
            X[:, 2 * width:] = table[right]
            Y = X @ self.W
        Y += self.b
        n = self.n_out
        best = Y[:, :n] if self.n_pieces == 1 else np.maximum(Y[:, :n], Y[:, n:2 * n])
        for p in range(2, self.n_pieces):
            np.maximum(best, Y[:, p * n:(p + 1) * n], out=best)
        mu = best.mean(axis=1, keepdims=True)
        var = best.var(axis=1, keepdims=True) + 1e-08
        out = (best - mu) * var ** (-1.0 / 2.0)
        out *= self.G
        out += self.shift
        return out


def _with_numpy_products(block):
    """A copy of a thinc layer whose matrix products run through numpy's BLAS (OpenBLAS)."""
    from thinc.api import NumpyOps

    class MatmulOps(NumpyOps):
        def gemm(self, x, y, *, out=None, trans1=False, trans2=False):
            return np.matmul(x.T if trans1 else x, y.T if trans2 else y, out=out)

    ops = MatmulOps()
    fast = block.copy()
    for node in fast.walk():
        node.ops = ops
    return fast


def _one_blas_thread() -> contextlib.AbstractContextManager:
    """numpy's BLAS limited to one thread (process-wide while it lasts): the tagger's thread is one
    of two (SegmentQueue), and more BLAS threads only contend with the caller's (measured: more
    CPU time, not less wall time). threadpoolctl comes with scikit-learn; without it, no limit."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")
