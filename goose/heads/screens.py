"""The exact heads: the model's own float32 head, and two cheaper exact argmaxes in front of it (issue:
cheaper verification).

With a 262k vocabulary the LM head dominates a CPU forward. Greedy
verification needs only each node's argmax, and the adjacency table only a
top-K that need not be exact. So the screened head multiplies in bfloat16
first (several times faster here), bounds how far any bf16 logit can be from
its float32 value, and recomputes in float32 only the rows that could still be
the maximum. The argmax it returns is the float32 argmax. Sampling reads its
rows through the same screen (goose.heads.rows.ScreenedRows).

Error bound for row r, with h~ = bf16(h), w~ = bf16(w_r), a = bf16(h~ . w~):
  |h.w - a| <= |h - h~| |w| + |h~| |w - w~|        (input rounding, Cauchy-Schwarz)
             + d * eps32 * |h~| |w~|              (float32 accumulation over d terms)
             + eps_bf16 * |a|                     (the product rounded to bf16)
Candidates are the rows whose upper bound reaches the best lower bound.

Where bf16 is emulated (a plain AVX2 CPU) the int8 screen takes its place:
fbgemm's int8 matrix product is 4-7x cheaper there than float32. The same
idea with a different error bound, in Int8ScreenedHead.
"""

from __future__ import annotations

import warnings

import torch

from goose.chunks import ChunkedRows
from goose.heads.protocol import softcap
from goose.heads.rows import ScreenedRows, TargetRows
from goose.packed import kernels_exist, packed_product, reorder_weight
from goose.parallel import is_sharded

BF16_EPS = 2.0 ** -8   # relative rounding of a bf16 value
FP32_EPS = 2.0 ** -24
SCREEN_WIDTH = 16  # bf16 top-k searched for candidates before a full scan
HEAD_REVISION = 3  # the screens' code: timings measured with another revision (head choice, costs) are stale
HEADS = ("int8", "screened", "full")  # exact through an int8 or a bf16 screen, or the textbook float32 head


class FullHead:
    """The model's own LM head: exact float32 logits for every row."""

    def __init__(self, lm_head: torch.nn.Module, cap: float | None) -> None:
        self.lm_head, self.cap = lm_head, cap

    @property
    def vocab_size(self) -> int:
        return self.lm_head.weight.shape[0]

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return softcap(self.lm_head(hidden), self.cap).float()

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        """(argmax per row, top-k per row or None)."""
        logits = self.logits(hidden)
        return logits.argmax(-1), (torch.topk(logits, top_k, dim=-1) if top_k else None)

    def target_rows(self, hidden: torch.Tensor) -> TargetRows:
        """One pass's rows as sampling needs them (every row's logits at once: the full head pays for all)."""
        return TargetRows(self, hidden)

    @torch.inference_mode()
    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        """The top-k per row for the adjacency table, as greedy() would give it (need not be exact)."""
        return torch.topk(self.logits(hidden), top_k, dim=-1)

    @torch.inference_mode()
    def top_among(self, hidden: torch.Tensor, vocabulary: torch.Tensor | None, top_k: int
                  ) -> torch.return_types.topk:
        """The top-k per row among the tokens `vocabulary` holds (ascending ids; None: all of them), in float32 from
        those rows of the head alone: a prefill's prompt rows need their successors, and most of a 262k
        vocabulary is never one (measured, embedded model, 2-core AVX2 EPYC, a 132-token HumanEval prompt: 8 ms
        among 4.3k tokens against 199 ms for the int8 screen of the whole vocabulary, the same first successor
        in 97% of rows). Every head kind gives the same."""
        weight = self.lm_head.weight
        if vocabulary is None or is_sharded(weight):  # a head split over ranks computes whole rows only
            return self.top(hidden, top_k)
        vocabulary = vocabulary.to(weight.device)
        logits = softcap(hidden.to(weight.dtype) @ weight[vocabulary].T, self.cap).float()
        top = torch.topk(logits, min(top_k, len(vocabulary)), dim=-1)
        return torch.return_types.topk((top.values, vocabulary[top.indices]))


class Screen(FullHead):
    """A head with a cheap approximate product (a screen): exact float32 rows only where asked for,
    the adjacency table's top-k from the screen, which need not be exact."""

    FLAT = 8192  # candidates in one row beyond which the whole row is computed in float32

    def __init__(self, lm_head: torch.nn.Linear, cap: float | None) -> None:
        super().__init__(lm_head, cap)
        # rows recomputed in float32, kept on the device so that counting never waits for it
        self._recomputed = torch.zeros((), dtype=torch.long, device=lm_head.weight.device)

    @property
    def screened_rows(self) -> int:
        """How many vocabulary rows needed a float32 recompute so far (for the curious)."""
        return int(self._recomputed)

    def approximate(self, hidden: torch.Tensor) -> torch.Tensor:
        """Screened logits [n, vocab] before soft-capping."""
        return self.screen(hidden)[0]

    def recompute(self, hidden: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """Float32 logits (before soft-capping) of the pairs (hidden[j], vocabulary row vocab[j]), counted.
        Pair by pair, each a dot product of its own: a row's logits do not depend on the other rows in
        the call, so a tree's rows round exactly as the autoregressive step's row does."""
        self._recomputed += len(vocab)
        return (self.weight[vocab] * hidden).sum(1)

    def screen(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(screened logits [n, vocab] before soft-capping, each row's bound [n] on their distance from the
        float32 logits)."""
        raise NotImplementedError

    def target_rows(self, hidden: torch.Tensor) -> TargetRows:
        """Float32 values only where the sampling walk asks, through the screen (ScreenedRows)."""
        return ScreenedRows(self, hidden)

    @torch.inference_mode()
    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        return self._capped_top(ChunkedRows(self.approximate(hidden.float())), top_k)

    def _capped_top(self, approx: ChunkedRows, top_k: int) -> torch.return_types.topk:
        """The top-k of screened logits (float32), soft-capped as the model's own logits are."""
        top = approx.top(top_k)
        return torch.return_types.topk((softcap(top.values.float(), self.cap), top.indices))


class ScreenedHead(Screen):
    """Exact float32 argmax through a bfloat16 screen; exact float32 rows only where asked for."""

    def __init__(self, lm_head: torch.nn.Linear, cap: float | None) -> None:
        super().__init__(lm_head, cap)
        weight = lm_head.weight.detach()
        self.weight = weight
        self.weight_bf16 = weight.to(torch.bfloat16)
        self.max_norm = float(weight.norm(dim=1).max())
        self.max_error_norm = float((weight - self.weight_bf16.float()).norm(dim=1).max())
        self.max_bf16_norm = float(self.weight_bf16.float().norm(dim=1).max())
        # On a CPU, oneDNN with the bf16 weight reordered once for it: the same bf16 products accumulated in
        # float32, which the bound covers whatever the order (measured, embedded model, AMX Xeon, 2 threads:
        # 1 to 16 rows 23-25 ms instead of 30-32 ms).
        self.packed_bf16 = None
        if weight.device.type == "cpu" and kernels_exist():
            try:
                self.packed_bf16 = reorder_weight(self.weight_bf16)
            except RuntimeError:  # a oneDNN build without bf16 products: the plain product below
                pass
        if self.packed_bf16 is not None:
            self.weight_bf16 = None  # the packed copy serves every product: one bf16 copy of the head, not two

    def screen(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """bf16 logits [n, vocab] (before soft-capping, as float32) and each row's slack (the bound in the
        module notes)."""
        approx, slack = self._bf16_screen(hidden)
        return approx.rows.float(), slack

    def _bf16_screen(self, hidden: torch.Tensor) -> tuple[ChunkedRows, torch.Tensor]:
        """The screen kept in bf16, as the product rounds it (a float32 copy would add no information, and at
        32 rows writing one costs 14 ms here), read through its chunks; and each row's slack."""
        rows = hidden.to(torch.bfloat16)
        approx = ChunkedRows(rows @ self.weight_bf16.T if self.packed_bf16 is None
                             else packed_product(rows, self.packed_bf16, None))
        low = rows.float()
        low_norm = low.norm(dim=1)
        slack = ((hidden - low).norm(dim=1) * self.max_norm + low_norm * self.max_error_norm
                 + hidden.shape[1] * FP32_EPS * low_norm * self.max_bf16_norm
                 + BF16_EPS * approx.abs_max().float())
        return approx, slack

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        hidden = hidden.float()
        approx, slack = self._bf16_screen(hidden)
        # The few largest bf16 logits hold every candidate unless the screen is unusually flat.
        top = approx.top(max(top_k, SCREEN_WIDTH))
        values = top.values.float()
        threshold = values[:, 0] - 2 * slack  # best lower bound, less one more slack for the upper bound
        candidates = values >= threshold[:, None]  # [n, width]: every row at once, no per-row loop
        exact = torch.einsum("nwd,nd->nw", self.weight[top.indices], hidden).masked_fill(~candidates, -torch.inf)
        argmax = top.indices.gather(1, exact.argmax(1, keepdim=True)).squeeze(1)
        self._recomputed += candidates.sum()
        flat = values[:, -1] >= threshold  # candidates beyond the top list: scan those rows whole
        if flat.any():  # one host synchronisation per call; a flat screen is rare
            rows = flat.nonzero().squeeze(1)
            inside = approx.rows[rows].float() >= threshold[rows, None]
            full = torch.nn.functional.linear(hidden[rows], self.weight).masked_fill(~inside, -torch.inf)
            argmax[rows] = full.argmax(1)
            self._recomputed += inside.sum() - candidates[rows].sum()
        if not top_k:
            return argmax, None
        return argmax, torch.return_types.topk((softcap(values[:, :top_k], self.cap), top.indices[:, :top_k]))

    @torch.inference_mode()
    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        return self._capped_top(self._bf16_screen(hidden.float())[0], top_k)


def block_hadamard(width: int) -> tuple[torch.Tensor, int]:
    """(the ±1 Hadamard matrix of the largest power-of-two block, at most 128, dividing `width`; its size)."""
    block = 1
    while block < 128 and width % (2 * block) == 0:
        block *= 2
    matrix = torch.ones(1, 1)
    while matrix.shape[0] < block:
        matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)])
    return matrix, block


class Int8ScreenedHead(Screen):
    """Exact float32 argmax through an int8 screen (fbgemm, CPU); exact float32 rows only where asked for.

    Set-up, once per model: rotate the head's rows by a signed block Hadamard R (orthogonal: logits are
    unchanged, h.w = hR.wR, and outlier coordinates are spread over the block, which shrinks the rounding
    error of both sides), round each rotated row to int8 with its own scale (w~), pack it for fbgemm.
    Per call: rotate h, round it to 127 levels per row (h~ = c k, k integer, |k| <= 63) and multiply
    k by w~ in int8 arithmetic. A pinned extra row of -64 and 63 makes fbgemm's own input quantisation
    the identity on k (scale 1, zero point 64), so the product is exactly c k.w~ up to float32 rounding.
    Error bound for vocabulary row v:
      |h.w - c k.w~| <= |hR - c k| |w| + |c k| max_v |wR - w~|     (Cauchy-Schwarz, both roundings)
                        + FLOAT_SLACK |h| |w|                       (rotation and float32 rounding)
    Every row whose screened logit comes within twice the bound of the row's best is recomputed in
    float32 from the original weights (measured on the embedded model: median 34 rows, 99th percentile
    about 1,400, of 262,144). The argmax among them is the float32 argmax.
    """

    CHUNK = 8192  # vocabulary rows per packed block: fbgemm then reuses a block from cache across rows
    LEVELS = 63  # |k| <= 63, so the unsigned 7-bit input never saturates fbgemm's AVX2 int16 pair sums
    FLOAT_SLACK = 1e-3  # generous: the float32 errors of rotation and accumulation are ~1e-5 relative
    ROW_BLOCK = 16  # rows screened at once for the adjacency table's top-k

    def __init__(self, lm_head: torch.nn.Linear, cap: float | None) -> None:
        super().__init__(lm_head, cap)
        weight = lm_head.weight.detach()
        self.weight = weight
        self.hadamard, self.block = block_hadamard(weight.shape[1])
        self.signs = torch.where(torch.rand(weight.shape[1], generator=torch.Generator().manual_seed(0)) < 0.5,
                                 -1.0, 1.0)
        self.max_norm = float(weight.norm(dim=1).max())
        self.packs, max_error = [], 0.0
        with warnings.catch_warnings():  # torch marks its quantized tensor factories as deprecated
            warnings.simplefilter("ignore")
            for chunk in weight.split(self.CHUNK):
                rotated = self.rotate(chunk)
                scale = (rotated.abs().amax(1, keepdim=True) / 127).clamp_min(1e-30)
                levels = torch.round(rotated / scale).clamp_(-127, 127)
                max_error = max(max_error, float((rotated - levels * scale).norm(dim=1).max()))
                quantized = torch._make_per_channel_quantized_tensor(
                    levels.to(torch.int8), scale[:, 0].double(), torch.zeros(len(chunk), dtype=torch.long), 0)
                self.packs.append(torch.ops.quantized.linear_prepack(quantized, None))
        self.max_error_norm = max_error
        self.pin = torch.zeros(1, weight.shape[1])
        self.pin[0, 0], self.pin[0, -1] = -self.LEVELS - 1, self.LEVELS

    @staticmethod
    def available(lm_head: torch.nn.Module) -> bool:
        """fbgemm's int8 kernels exist (x86 builds of torch; torch marks these ops deprecated) and the head
        lives on the CPU."""
        try:
            torch.ops.quantized.linear_dynamic, torch.ops.quantized.linear_prepack  # noqa: B018
        except (AttributeError, RuntimeError):
            return False
        return "fbgemm" in torch.backends.quantized.supported_engines and lm_head.weight.device.type == "cpu"

    def rotate(self, rows: torch.Tensor) -> torch.Tensor:
        signed = (rows * self.signs).reshape(rows.shape[0], -1, self.block)
        return (signed @ self.hadamard).reshape(rows.shape) * self.block ** -0.5

    def screen(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 logits [n, vocab] before soft-capping, each row's error bound [n])."""
        rotated = self.rotate(hidden)
        step = (rotated.abs().amax(1, keepdim=True) / self.LEVELS).clamp_min(1e-30)
        levels = torch.round(rotated / step)
        rounded = levels * step
        inputs = torch.cat([levels, self.pin])
        # each block's product scaled straight into its columns: one write of the [n, vocab] screen, not three
        # (the blocks, their concatenation, the scaled copy)
        screened = torch.empty(hidden.shape[0], self.weight.shape[0], device=hidden.device)
        start = 0
        for pack in self.packs:
            block = torch.ops.quantized.linear_dynamic(inputs, pack, True)
            torch.mul(block[:-1], step, out=screened[:, start:start + block.shape[1]])
            start += block.shape[1]
        bound = ((rotated - rounded).norm(dim=1) * self.max_norm + rounded.norm(dim=1) * self.max_error_norm
                 + self.FLOAT_SLACK * hidden.norm(dim=1) * self.max_norm)
        return screened, bound

    @torch.inference_mode()
    def greedy(self, hidden: torch.Tensor, top_k: int = 0) -> tuple[torch.Tensor, torch.return_types.topk | None]:
        hidden = hidden.float()
        n = hidden.shape[0]
        screened, bound = self.screen(hidden)
        approx = ChunkedRows(screened)
        threshold = approx.row_max() - 2 * bound  # below it, a row's upper bound misses the best lower bound
        rows, vocab = approx.at_least(threshold)  # read from the chunks that reach it, not the whole [n, vocab]
        # counted from the pairs: a sum over the [n, vocab] mask would first widen it to int64 (measured:
        # half of a 16-row call)
        flat = torch.bincount(rows, minlength=n) > self.FLAT  # this flat: one float32 pass over the row is cheaper
        if flat.any():
            keep = ~flat[rows]
            rows, vocab = rows[keep], vocab[keep]
        exact = self.recompute(hidden[rows], vocab)
        best = torch.full((n,), -torch.inf).scatter_reduce(0, rows, exact, "amax")
        winners = exact == best[rows]
        # the first maximum, as torch.argmax over the full row would pick it
        argmax = torch.full((n,), self.weight.shape[0]).scatter_reduce(0, rows[winners], vocab[winners], "amin")
        if flat.any():
            argmax[flat] = torch.nn.functional.linear(hidden[flat], self.weight).argmax(1)
            self._recomputed += int(flat.sum()) * self.weight.shape[0]
        return argmax, (self._capped_top(approx, top_k) if top_k else None)

    @torch.inference_mode()
    def top(self, hidden: torch.Tensor, top_k: int) -> torch.return_types.topk:
        """Blocks of ROW_BLOCK rows: a prompt's hundreds of rows at once would build a screen of hundreds of
        megabytes, and writing it costs more than the int8 product itself (measured)."""
        blocks = [super(Int8ScreenedHead, self).top(block, top_k) for block in hidden.split(self.ROW_BLOCK)]
        return torch.return_types.topk((torch.cat([b.values for b in blocks]), torch.cat([b.indices for b in blocks])))
