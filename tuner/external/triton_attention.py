"""Flash attention compiled by Triton for Hopper, for `hal.dispatch.extern` (tuner.external).

One workgroup per bm query rows of one head: the keys in steps of bn, the running row maximum and
sum in f32 (exp2 of scores taken in log2 units), both products by `tl.dot` (wgmma on sm_90a),
rows and keys past the problem's masked (the blocks of keys none of which is masked for the
tile's rows computed without the check: all but the last partial one, or those before the causal
diagonal); Q, K, V and the result read and written in the layout
the problem says (`seq_major`), K and V of one head for each group of query heads where they
have fewer (grouped-query attention, `kv_heads`). A row whose every key is masked out gives zeros (the
exporter's `Where(IsNaN(P), 0, P)` guard gives the same). The bindings are Q, K, V, then the
mask where there is one, then the result."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import ExternKernel
from tuner.external.attention_kernel import AttentionProblem, AttentionTiles, padded_width
from tuner.external.triton_build import TMA_PTX_VERSION, compile_for_iree, language


@cache
def attention_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _attention(q_ptr, k_ptr, v_ptr, x_ptr, y_ptr, H: tl.constexpr, M: tl.constexpr, N: tl.constexpr,
                   D: tl.constexpr, DV: tl.constexpr, MZ: tl.constexpr, MSZ: tl.constexpr, MSH: tl.constexpr,
                   MSM: tl.constexpr,
                   HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr, SCALE: tl.constexpr, BM: tl.constexpr,
                   BN: tl.constexpr, QT: tl.constexpr, KT: tl.constexpr, VT: tl.constexpr, OT: tl.constexpr,
                   QR: tl.constexpr, KR: tl.constexpr, VR: tl.constexpr, QO: tl.constexpr, KO: tl.constexpr,
                   VO: tl.constexpr, G: tl.constexpr, DP: tl.constexpr, DVP: tl.constexpr):
        # x_ptr is the mask and y_ptr the result where HAS_MASK, else x_ptr is the result. QT, KT,
        # VT, OT: Q, K, V, the result lie [z, seq, h, d] (a row every H * d values, the head's d
        # at h * d), else [z, h, seq, d]. QR, KR, VR: a seq-major Q, K, V's row width (H * d, or a
        # fused projection's), QO, KO, VO: where in the row it starts. G: the query heads that share
        # one key/value head (grouped-query attention; 1: each its own). DP, DVP: D and DV padded
        # to a power of two (tl.arange's), the columns past D and DV read as zeros and not written.
        log2e: tl.constexpr = 1.4426950408889634
        start = tl.program_id(0)
        zh = tl.program_id(1)
        z = zh // H
        h = zh % H
        kh = h // G  # this head's key/value head
        zk = z * (H // G) + kh
        rows = start * BM + tl.arange(0, BM)
        keys = tl.arange(0, BN)
        dk = tl.arange(0, DP)
        dv = tl.arange(0, DVP)
        q_in = rows[:, None] < M
        if DP != D:
            q_in = q_in & (dk[None, :] < D)
        if QT:
            q_at = z * M * QR + rows[:, None] * QR + QO + h * D + dk[None, :]
        else:
            q_at = zh * M * D + rows[:, None] * D + dk[None, :]
        q = tl.load(q_ptr + q_at, mask=q_in, other=0.0)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, DVP], tl.float32)
        # The keys in two runs: first the blocks no key of which is masked for any row of this
        # tile (past N, or after a query's position where CAUSAL), computed without a check;
        # then the rest (the last partial block, the causal diagonal) with one.
        hi = N
        whole = (N // BN) * BN
        if CAUSAL:
            hi = tl.minimum(N, (start + 1) * BM)
            whole = tl.minimum(whole, (start * BM) // BN * BN)
        for checked in tl.static_range(2):
            if checked:
                lo, end = whole, hi
            else:
                lo, end = 0, whole
            for first in range(lo, end, BN):
                cols = first + keys
                if KT:
                    k_at = z * N * KR + cols[None, :] * KR + KO + kh * D + dk[:, None]
                else:
                    k_at = zk * N * D + cols[None, :] * D + dk[:, None]
                if checked:
                    k_in = cols[None, :] < N
                    if DP != D:
                        k_in = k_in & (dk[:, None] < D)
                    k = tl.load(k_ptr + k_at, mask=k_in, other=0.0)
                elif DP != D:
                    k = tl.load(k_ptr + k_at, mask=dk[:, None] < D, other=0.0)
                else:
                    k = tl.load(k_ptr + k_at)
                s = tl.dot(q, k) * (SCALE * log2e)
                if HAS_MASK:
                    extra = tl.load(x_ptr + (z % MZ) * MSZ + h * MSH + rows[:, None] * MSM + cols[None, :],
                                    mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
                    s += extra.to(tl.float32) * log2e
                if checked:
                    keep = cols[None, :] < N
                    if CAUSAL:
                        keep = keep & (cols[None, :] <= rows[:, None])
                    s = tl.where(keep, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                if HAS_MASK:  # a row whose every key so far is masked out has no maximum yet
                    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                else:  # every row has a key in the first block (key 0; a causal row's too)
                    m_use = m_new
                p = tl.math.exp2(s - m_use[:, None])
                alpha = tl.math.exp2(m_i - m_use)
                l_i = l_i * alpha + tl.sum(p, 1)
                if VT:
                    v_at = z * N * VR + cols[:, None] * VR + VO + kh * DV + dv[None, :]
                else:
                    v_at = zk * N * DV + cols[:, None] * DV + dv[None, :]
                if checked:
                    v_in = cols[:, None] < N
                    if DVP != DV:
                        v_in = v_in & (dv[None, :] < DV)
                    v = tl.load(v_ptr + v_at, mask=v_in, other=0.0)
                elif DVP != DV:
                    v = tl.load(v_ptr + v_at, mask=dv[None, :] < DV, other=0.0)
                else:
                    v = tl.load(v_ptr + v_at)
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
                m_i = m_new
        acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        if HAS_MASK:
            out = y_ptr
        else:
            out = x_ptr
        if OT:
            o_at = z * M * H * DV + rows[:, None] * (H * DV) + h * DV + dv[None, :]
        else:
            o_at = zh * M * DV + rows[:, None] * DV + dv[None, :]
        o_in = rows[:, None] < M
        if DVP != DV:
            o_in = o_in & (dv[None, :] < DV)
        tl.store(out + o_at, acc.to(out.dtype.element_ty), mask=o_in)

    return _attention


@cache
def attention_tma_jit():
    """The kernel of `attention_jit` with Q, K, V and the result moved by the Tensor Memory
    Accelerator (tiles.tma): each a 3-D descriptor made on the device in Triton's global scratch
    (IREE's last binding), [z, seq, row] where it lies seq-major (the head's columns a block of
    the row) and [z x heads, seq, d] where not; rows and keys past the problem's read as zeros and
    not written. Head widths that are powers of two only (`AttentionProblem.tma_fits`); the mask,
    where there is one, by pointers as in `attention_jit`. Its online-softmax step is written out
    as that kernel's is: a jit helper shared through the enclosing function compiles (Triton 3.6
    and 3.9) but Triton's interpreter, which checks these kernels here, does not see it."""
    triton, tl = language()

    @triton.jit
    def _attention_tma(q_ptr, k_ptr, v_ptr, x_ptr, y_ptr, Z: tl.constexpr, H: tl.constexpr, M: tl.constexpr,
                       N: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, MZ: tl.constexpr, MSZ: tl.constexpr,
                       MSH: tl.constexpr, MSM: tl.constexpr, HAS_MASK: tl.constexpr, CAUSAL: tl.constexpr,
                       SCALE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, QT: tl.constexpr, KT: tl.constexpr,
                       VT: tl.constexpr, OT: tl.constexpr, QR: tl.constexpr, KR: tl.constexpr, VR: tl.constexpr,
                       QO: tl.constexpr, KO: tl.constexpr, VO: tl.constexpr, G: tl.constexpr):
        log2e: tl.constexpr = 1.4426950408889634
        KV: tl.constexpr = H // G
        start = tl.program_id(0)
        zh = tl.program_id(1)
        z = zh // H
        h = zh % H
        kh = h // G
        zk = z * KV + kh
        if HAS_MASK:
            out = y_ptr
        else:
            out = x_ptr
        if QT:
            q_desc = tl.make_tensor_descriptor(q_ptr, shape=[Z, M, QR], strides=[M * QR, QR, 1], block_shape=[1, BM, D])
            q_at = [z, start * BM, QO + h * D]
        else:
            q_desc = tl.make_tensor_descriptor(q_ptr, shape=[Z * H, M, D], strides=[M * D, D, 1], block_shape=[1, BM, D])
            q_at = [zh, start * BM, 0]
        if KT:
            k_desc = tl.make_tensor_descriptor(k_ptr, shape=[Z, N, KR], strides=[N * KR, KR, 1], block_shape=[1, BN, D])
            k_z, k_col = z, KO + kh * D
        else:
            k_desc = tl.make_tensor_descriptor(k_ptr, shape=[Z * KV, N, D], strides=[N * D, D, 1], block_shape=[1, BN, D])
            k_z, k_col = zk, 0
        if VT:
            v_desc = tl.make_tensor_descriptor(v_ptr, shape=[Z, N, VR], strides=[N * VR, VR, 1], block_shape=[1, BN, DV])
            v_z, v_col = z, VO + kh * DV
        else:
            v_desc = tl.make_tensor_descriptor(v_ptr, shape=[Z * KV, N, DV], strides=[N * DV, DV, 1],
                                               block_shape=[1, BN, DV])
            v_z, v_col = zk, 0
        if OT:
            o_desc = tl.make_tensor_descriptor(out, shape=[Z, M, H * DV], strides=[M * H * DV, H * DV, 1],
                                               block_shape=[1, BM, DV])
            o_at = [z, start * BM, h * DV]
        else:
            o_desc = tl.make_tensor_descriptor(out, shape=[Z * H, M, DV], strides=[M * DV, DV, 1], block_shape=[1, BM, DV])
            o_at = [zh, start * BM, 0]
        q = q_desc.load(q_at).reshape(BM, D)
        rows = start * BM + tl.arange(0, BM)
        keys = tl.arange(0, BN)
        m_i = tl.full([BM], float("-inf"), tl.float32)
        l_i = tl.zeros([BM], tl.float32)
        acc = tl.zeros([BM, DV], tl.float32)
        hi = N
        whole = (N // BN) * BN
        if CAUSAL:
            hi = tl.minimum(N, (start + 1) * BM)
            whole = tl.minimum(whole, (start * BM) // BN * BN)
        for checked in tl.static_range(2):
            if checked:
                lo, end = whole, hi
            else:
                lo, end = 0, whole
            for first in range(lo, end, BN):
                cols = first + keys
                k = k_desc.load([k_z, first, k_col]).reshape(BN, D)
                s = tl.dot(q, k.T) * (SCALE * log2e)
                if HAS_MASK:
                    extra = tl.load(x_ptr + (z % MZ) * MSZ + h * MSH + rows[:, None] * MSM + cols[None, :],
                                    mask=(rows[:, None] < M) & (cols[None, :] < N), other=0.0)
                    s += extra.to(tl.float32) * log2e
                if checked:
                    keep = cols[None, :] < N
                    if CAUSAL:
                        keep = keep & (cols[None, :] <= rows[:, None])
                    s = tl.where(keep, s, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                if HAS_MASK:
                    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                else:
                    m_use = m_new
                p = tl.math.exp2(s - m_use[:, None])
                alpha = tl.math.exp2(m_i - m_use)
                l_i = l_i * alpha + tl.sum(p, 1)
                v = v_desc.load([v_z, first, v_col]).reshape(BN, DV)
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
                m_i = m_new
        acc = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        o_desc.store(o_at, acc.to(out.dtype.element_ty).reshape(1, BM, DV))

    return _attention_tma


def constants(problem: AttentionProblem, tiles: AttentionTiles) -> dict[str, object]:
    """The kernel's constexpr arguments for `problem` with `tiles` (by name, in its order)."""
    if problem.mask:
        mz, mh, mm = problem.mask
        strides = (mh * mm * problem.n if mz > 1 else 0, mm * problem.n if mh > 1 else 0, problem.n if mm > 1 else 0)
    else:
        mz, strides = 1, (0, 0, 0)
    # MZ: the mask's z dim repeats every mz (Swin's windows of each image: z = image x nW + window)
    return {"H": problem.h, "M": problem.m, "N": problem.n, "D": problem.d, "DV": problem.dv, "MZ": mz,
            "MSZ": strides[0], "MSH": strides[1], "MSM": strides[2], "HAS_MASK": bool(problem.mask),
            "CAUSAL": problem.causal, "SCALE": float(problem.scale), "BM": tiles.bm, "BN": tiles.bn,
            **dict(zip(("QT", "KT", "VT", "OT"), problem.seq_major)),
            **dict(zip(("QR", "KR", "VR"), problem.row_widths)),
            **dict(zip(("QO", "KO", "VO"), problem.offsets)), "G": problem.h // problem.kv,
            "DP": padded_width(problem.d), "DVP": padded_width(problem.dv)}


def grid(problem: AttentionProblem, tiles: AttentionTiles) -> tuple[int, int, int]:
    """(query tiles, heads of every z)."""
    return -(-problem.m // tiles.bm), problem.z * problem.h, 1


def tma_values(problem: AttentionProblem, tiles: AttentionTiles) -> dict[str, object]:
    """`attention_tma_jit`'s constexpr arguments (by name, in its order; `y_ptr` None where there
    is no mask: the result is x_ptr)."""
    values = {"Z": problem.z, **{k: v for k, v in constants(problem, tiles).items() if k not in ("DP", "DVP")}}
    return values if problem.mask else {"y_ptr": None, **values}


@cache  # each problem's kernel compiled once a process: the rewrites alone and joined share it
def triton_attention(problem: AttentionProblem, tiles: AttentionTiles) -> ExternKernel:
    """The Hopper kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    why = problem.why_not()
    if why:
        raise ValueError(f"no external attention kernel for {why}")
    pointers = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16"}
    if problem.mask:
        pointers["x_ptr"] = "*fp16" if problem.mask_element == "f16" else "*fp32"
        pointers["y_ptr"] = "*fp16"
    else:  # the result is x_ptr; y_ptr is unread and not a binding
        pointers["x_ptr"] = pointers["y_ptr"] = "*fp16"
    if tiles.tma:
        if not problem.tma_fits():
            raise ValueError(f"the TMA kernel does not take {problem.name} (head widths no power of two, or rows "
                             "not whole 16 bytes)")
        if not problem.mask:
            pointers.pop("y_ptr")
        return compile_for_iree(attention_tma_jit(), pointers, tma_values(problem, tiles), tiles, problem.name,
                                grid(problem, tiles), ptx_version=TMA_PTX_VERSION)
    return compile_for_iree(attention_jit(), pointers, constants(problem, tiles), tiles, problem.name,
                            grid(problem, tiles), bindings=5 if problem.mask else 4)
