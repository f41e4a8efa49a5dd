"""Compiled inner loops of the exact planner (`devplace_lite.compiled`: ahead of time at install).

`fill_ideals` is the DP over pairs of ideals (`devplace_lite.multidim.planner` states the
recurrence and why each cut is exact); `stage_pick` is one stage's choice of TMPCs, for the plan
the DP found. The helpers: `_curve` (a stage's least time for every number of micro-batches in
flight), `solve_mckp` (the exact multiple-choice knapsack inside it), `_piper_greedy` (Piper's
program's rule, to compare with its figures).
"""

from __future__ import annotations

import numpy as np

from ..compiled import helper, kernel

INF = 1e300


@helper
def _slope(n_items, optr, cost, mem, R, lam):
    s = -R
    for i in range(n_items):
        b, bm = INF, 0.0
        for o in range(optr[i], optr[i + 1]):
            x = cost[o] + lam * mem[o]
            if x < b or (x == b and mem[o] < bm):
                b, bm = x, mem[o]
        s += bm
    return s


@helper
def _dual(n_items, optr, cost, mem, R, lam):
    s = -lam * R
    for i in range(n_items):
        b = INF
        for o in range(optr[i], optr[i + 1]):
            x = cost[o] + lam * mem[o]
            if x < b:
                b = x
        s += b
    return s


@helper
def _lagrange(n_items, optr, cost, mem, R, lam_out):
    """The multiplier λ >= 0 maximising the Lagrangian bound sum_i min_o (c + λ m) - λ R, and that
    bound. The dual is concave and piecewise linear with breaks at the items' trade-off ratios;
    its slope (memory of the λ-cheapest options, less R) falls with λ: binary search on it."""
    cnt = 0
    for i in range(n_items):
        for o in range(optr[i], optr[i + 1]):
            for q in range(optr[i], optr[i + 1]):
                if mem[q] > mem[o] and cost[o] > cost[q]:
                    cnt += 1
    rs = np.empty(cnt + 1)
    rs[0] = 0.0
    cnt = 1
    for i in range(n_items):
        for o in range(optr[i], optr[i + 1]):
            for q in range(optr[i], optr[i + 1]):
                if mem[q] > mem[o] and cost[o] > cost[q]:
                    rs[cnt] = (cost[o] - cost[q]) / (mem[q] - mem[o])
                    cnt += 1
    rs.sort()
    lo, hi = 0, cnt - 1  # find the first ratio where the slope is <= 0
    while lo < hi:
        mid = (lo + hi) // 2
        if _slope(n_items, optr, cost, mem, R, rs[mid]) <= 0:
            hi = mid
        else:
            lo = mid + 1
    lam = rs[lo]
    best = _dual(n_items, optr, cost, mem, R, lam)
    if lo > 0:
        v = _dual(n_items, optr, cost, mem, R, rs[lo - 1])
        if v > best:
            best, lam = v, rs[lo - 1]
    lam_out[0] = lam
    return best


@helper
def solve_mckp(n_items, optr, cost, mem, R, choice, ub, gval, gpick):
    """Exact multiple-choice knapsack: one option per item, sum of mem <= R, least sum of cost.

    A dynamic program over the items keeping the Pareto front of (memory, cost) of partial
    choices; a partial choice is dropped when the rest cannot fit (least memory of the rest) or
    cannot beat ``ub`` (cheapest rest, and the Lagrangian bound with the dual-optimal multiplier).
    Near-equal layers (a transformer stack) keep the front small, where branching would not.
    ``gval``, ``gpick``: a feasible choice (global option indices) and its cost, or INF; it is
    returned as is when the Lagrangian bound proves it optimal. Writes the chosen option index of
    each item into ``choice``; returns the least cost, or INF when nothing fits or beats ``ub``.
    """
    if gval < ub:
        ub = gval
    lam_a = np.zeros(1)
    lb = _lagrange(n_items, optr, cost, mem, R, lam_a)
    if lb > ub + 1e-12 * abs(ub):
        return INF  # nothing beats ub: the caller's bound or its feasible greedy choice
    if gval < INF and gval <= lb + 1e-12 * abs(lb):
        for i in range(n_items):
            choice[i] = gpick[i] - optr[i]
        return gval
    lam = lam_a[0]
    # items whose choice the multiplier settles clearly first: the front stays one state wide
    # until the few items near the critical trade-off ratio
    gap = np.empty(n_items)
    for i in range(n_items):
        b1, b2 = INF, INF
        for o in range(optr[i], optr[i + 1]):
            x = cost[o] + lam * mem[o]
            if x < b1:
                b1, b2 = x, b1
            elif x < b2:
                b2 = x
        gap[i] = b2 - b1 if b2 < INF else INF
    order = np.argsort(-gap, kind="mergesort")
    minc_suf = np.zeros(n_items + 1)
    minm_suf = np.zeros(n_items + 1)
    h_suf = np.zeros(n_items + 1)
    for j in range(n_items - 1, -1, -1):
        i = order[j]
        mc, mm, hh = INF, INF, INF
        for o in range(optr[i], optr[i + 1]):
            mc = min(mc, cost[o])
            mm = min(mm, mem[o])
            hh = min(hh, cost[o] + lam * mem[o])
        minc_suf[j] = minc_suf[j + 1] + mc
        minm_suf[j] = minm_suf[j + 1] + mm
        h_suf[j] = h_suf[j + 1] + hh
    cut = ub + 1e-12 * abs(ub) if ub < INF else INF
    cap = 1024
    sm = np.zeros(cap)
    sc = np.zeros(cap)
    par = np.zeros(cap, np.int64)
    sop = np.zeros(cap, np.int64)
    lvl = np.zeros(n_items + 2, np.int64)
    lvl[0], lvl[1] = 0, 1  # the root: nothing chosen
    n_st = 1
    maxk = 1
    for i in range(n_items):
        maxk = max(maxk, optr[i + 1] - optr[i])
    heads = np.empty(maxk, np.int64)
    for j in range(n_items):
        i = order[j]
        a, b = lvl[j], lvl[j + 1]
        o0, o9 = optr[i], optr[i + 1]
        if n_st + (b - a) * (o9 - o0) > cap:
            while n_st + (b - a) * (o9 - o0) > cap:
                cap *= 2
            sm = np.concatenate((sm, np.zeros(cap - sm.shape[0])))
            sc = np.concatenate((sc, np.zeros(cap - sc.shape[0])))
            par = np.concatenate((par, np.zeros(cap - par.shape[0], np.int64)))
            sop = np.concatenate((sop, np.zeros(cap - sop.shape[0], np.int64)))
        rest_m, rest_c, rest_h = minm_suf[j + 1], minc_suf[j + 1], h_suf[j + 1]
        # the front is sorted by memory (rising) with time falling; adding option o keeps that
        # order, so the next front is a merge of one sorted run per option, each state kept
        # when it is faster than every kept state of no more memory
        for o in range(o0, o9):
            heads[o - o0] = a
        best_c = INF
        first = n_st
        while True:
            bo, bm, bc = -1, 0.0, 0.0
            for o in range(o0, o9):
                st = heads[o - o0]
                while st < b:
                    m = sm[st] + mem[o]
                    if m + rest_m > R:
                        st = b  # the later states hold more memory: none of them fits
                        break
                    c = sc[st] + cost[o]
                    bound = c + rest_c
                    lb2 = c + rest_h - lam * (R - m)
                    if lb2 > bound:
                        bound = lb2
                    if bound > cut or c >= best_c:
                        st += 1
                        continue
                    if bo < 0 or m < bm or (m == bm and c < bc):
                        bo, bm, bc = o, m, c
                    break
                heads[o - o0] = st
            if bo < 0:
                break
            st = heads[bo - o0]
            sm[n_st], sc[n_st], par[n_st], sop[n_st] = bm, bc, st, bo
            n_st += 1
            best_c = bc
            heads[bo - o0] = st + 1
        if n_st == first:
            return INF
        lvl[j + 2] = n_st
    a, b = lvl[n_items], lvl[n_items + 1]
    best, arg = INF, -1
    for st in range(a, b):
        if sc[st] < best:
            best, arg = sc[st], st
    st = arg
    for j in range(n_items - 1, -1, -1):
        i = order[j]
        choice[i] = sop[st] - optr[i]
        st = par[st]
    return best


@helper
def _piper_greedy(n_items, optr, cost, mem, fast, M, strict, cur):
    """Piper's program's rule: from the all-fastest choice, apply the swaps in increasing order of
    (time added) / (memory saved), ties by item then option, until the memory fits (to within
    1e-9 bytes, as its program stops; with ``strict``, INF unless it fits exactly). Writes the
    chosen options into ``cur``; returns their time."""
    tot_mem = 0.0
    tot = 0.0
    for i in range(n_items):
        tot_mem += mem[fast[i]]
        tot += cost[fast[i]]
    shave = tot_mem - M
    cnt = 0
    for i in range(n_items):
        for o in range(optr[i], optr[i + 1]):
            if mem[fast[i]] - mem[o] > 1e-9:
                cnt += 1
    ratio = np.empty(cnt)
    item = np.empty(cnt, np.int64)
    opt = np.empty(cnt, np.int64)
    q = 0
    for i in range(n_items):
        for o in range(optr[i], optr[i + 1]):
            sav = mem[fast[i]] - mem[o]
            if sav > 1e-9:
                ratio[q] = (cost[o] - cost[fast[i]]) / sav
                item[q] = i
                opt[q] = o
                q += 1
    # order by (ratio, item, option) as a stable sort of the (item, option)-ordered list
    srt = np.argsort(ratio, kind="mergesort")
    cur[:n_items] = fast[:n_items]
    for r in range(cnt):
        i = item[srt[r]]
        o = opt[srt[r]]
        shave -= mem[cur[i]] - mem[o]
        tot += cost[o] - cost[cur[i]]
        cur[i] = o
        if shave < 1e-9:
            break
    if strict and shave > 0:
        return INF
    return tot


@helper
def _fastest(n_items, optr, cost, fast):
    """Each item's fastest option (the first among equals) into ``fast``; their total time."""
    tot = 0.0
    for i in range(n_items):
        f = optr[i]
        for o in range(optr[i] + 1, optr[i + 1]):
            if cost[o] < cost[f]:
                f = o
        fast[i] = f
        tot += cost[f]
    return tot


@helper
def _curve(n_items, optr, cost, A, B, M, Y, out, cut, greedy, fast, mem, choice, gpick):
    """``out[y]`` for ``y = 1..Y``: a stage's least time, one option per item, with memory
    ``sum(A*y + B) <= M``; INF where nothing fits or past ``cut[y]`` (non-increasing in ``y``).

    Exact (`solve_mckp`), solved once per distinct value: the least time cannot fall as ``y``
    grows, so an optimum at ``y`` stays optimal for every larger ``y`` where it still fits, and
    the first ``y`` past its cut or where nothing fits ends the curve. ``greedy`` instead applies
    Piper's rule at every ``y``, to compare with its program (the rule need not grow with ``y``).
    Returns 1 when some value was cut, else 0.
    """
    for y in range(Y + 1):
        out[y] = INF
    nopt = optr[n_items]
    cfast = _fastest(n_items, optr, cost, fast)
    afast, bfast = 0.0, 0.0
    for i in range(n_items):
        afast += A[fast[i]]
        bfast += B[fast[i]]
    was_cut = 0
    y = 1
    while y <= Y:
        if afast * y + bfast <= M:
            if cfast > cut[y]:
                return 1
            out[y] = cfast
            y += 1
            continue
        low = 0.0
        for i in range(n_items):
            b = INF
            for o in range(optr[i], optr[i + 1]):
                b = min(b, A[o] * y + B[o])
            low += b
        if low > M:
            return was_cut
        for o in range(nopt):
            mem[o] = A[o] * y + B[o]
        if greedy:
            g = _piper_greedy(n_items, optr, cost, mem, fast, M, False, gpick)
            if g <= cut[y]:
                out[y] = g
            else:
                was_cut = 1
            y += 1
            continue
        gval = _piper_greedy(n_items, optr, cost, mem, fast, M, True, gpick)
        val = solve_mckp(n_items, optr, cost, mem, M, choice, cut[y], gval, gpick)
        if val > cut[y]:
            return 1
        sa, sb = 0.0, 0.0
        for i in range(n_items):
            o = optr[i] + choice[i]
            sa += A[o]
            sb += B[o]
        out[y] = val
        y += 1
        while y <= Y and sa * y + sb <= M and not (afast * y + bfast <= M):
            if val > cut[y]:
                return 1
            out[y] = val
            y += 1
    return was_cut


@helper
def _resolve(y, thr, n_items, optr, cost, A, B, M, greedy, fast, mem, choice, gpick, mq, mst, mstamp, pt, base,
             Smax, afast, bfast):
    """The stage's least time at ``y`` micro-batches in flight, when it is below ``thr``, into the
    memo ``mq[base + y]`` with its state ``mst``: 1 exact, 2 at least ``thr`` (nothing below it),
    3 nothing fits. An exact optimum is also exact at every larger ``y`` where it still fits and
    the fastest choice does not (the least time cannot fall as ``y`` grows)."""
    low = 0.0
    for i in range(n_items):
        b = INF
        for o in range(optr[i], optr[i + 1]):
            b = min(b, A[o] * y + B[o])
        low += b
    if low > M:
        mst[base + y] = 3
        return
    for o in range(optr[n_items]):
        mem[o] = A[o] * y + B[o]
    if greedy:
        mq[base + y] = _piper_greedy(n_items, optr, cost, mem, fast, M, False, gpick)
        mst[base + y] = 1
        return
    gval = _piper_greedy(n_items, optr, cost, mem, fast, M, True, gpick)
    val = solve_mckp(n_items, optr, cost, mem, M, choice, thr, gval, gpick)
    if val >= INF:
        mq[base + y] = thr
        mst[base + y] = 2
        return
    sa, sb = 0.0, 0.0
    for i in range(n_items):
        o = optr[i] + choice[i]
        sa += A[o]
        sb += B[o]
    y2 = y
    while y2 <= Smax and sa * y2 + sb <= M and not (afast * y2 + bfast <= M):
        mq[base + y2] = val
        mst[base + y2] = 1
        mstamp[base + y2] = pt
        y2 += 1


@helper
def stage_items(member, t_idx, nT, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c,
                o_in, sfw, o_out, sbw, lay, n_lay, it_ptr, it_opt, it_e, it_A, it_B, Aall, Ball):
    """Items of the stage whose layers are ``lay[:n_lay]`` (``member`` marks them) at tensor
    degree index ``t_idx``: per option its global index, memory coefficients and the bytes sent
    over the stage's cut edges (Piper's 2 * (c + sync) per cut edge). Returns the item count, or
    -1 when some layer has no TMPC at this degree."""
    q = 0
    it_ptr[0] = 0
    for x in range(n_lay):
        v = lay[x]
        a0 = optr_vt[v * nT + t_idx]
        a1 = optr_vt[v * nT + t_idx + 1]
        if a1 == a0:
            return -1
        for o in range(a0, a1):
            e = 0.0
            for j in range(in_ptr[v], in_ptr[v + 1]):
                if member[in_src[j]] == 0:
                    e += 2.0 * (in_c[j] + sfw[o_in[o] + j - in_ptr[v]])
            for j in range(out_ptr[v], out_ptr[v + 1]):
                if member[out_dst[j]] == 0:
                    e += 2.0 * (out_c[j] + sbw[o_out[o] + j - out_ptr[v]])
            it_opt[q] = o
            it_e[q] = e
            it_A[q] = Aall[o]
            it_B[q] = Ball[o]
            q += 1
        it_ptr[x + 1] = q
    return n_lay


@helper
def item_costs(n_opts, it_opt, it_e, p, w, d, N, bw, it_cost):
    """Time per sample of each item option at data-parallel degree ``d`` (Piper's formula:
    cut-edge bytes / d plus the resync 4 (d-1) w / (d N), over the bandwidth, plus p / d)."""
    for q in range(n_opts):
        o = it_opt[q]
        comm = it_e[q] / d + 4.0 * (d - 1) * w[o] / d / N
        it_cost[q] = comm / bw + p[o] / d


_I, _F = "i8[::1]", "f8[::1]"


@kernel(f"i8(i8, i8, u1[:, ::1], {_I}, {_I}, {_I}, {_I}, {_I}, {_I}, {_F}, {_I}, {_I}, {_F}, {_I}, {_F}, "
        f"{_I}, {_F}, {_F}, {_F}, {_F}, {_F}, {_F}, {_F}, {_I}, i8, i8, i8, f8, f8, b1, b1, b1, f8, {_I}, {_I}, "
        f"{_I}, {_F}, i8[:, ::1], {_I})")
def fill_ideals(I0, budget, member, isub_ptr, isub, tvals, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst,
                out_c, o_in, sfw, o_out, sbw, p, w, Aall, Ball, minmem_vt, w_item, divs, K, Smax, N, M, bw,
                greedy, shared, dense, ub, ptr, pool_k, pool_s, pool_v, pool_o, flags):  # pragma: no cover
    """The DP's points of ideals ``I0, I0 + 1, ...`` from their sub-ideals' points, until about
    ``budget`` pairs were visited; returns the next ideal, or ``-1 - I`` when the pool is full at
    ``I`` (grow it and call again from ``I``).

    Ideal ``I``'s points are ``pool[ptr[I]:ptr[I + 1]]``: ``(k, s, v)`` with ``v`` the least time
    per sample of ``I`` on at most ``k`` devices with data-parallel degrees summing to at most
    ``s``, kept only where no point of fewer or equal ``k`` and ``s`` is as good, and only up to
    ``ub``; sorted by ``k`` then ``s`` (so ``v`` falls along each ``k``); ``pool_o`` holds the
    first stage's ``(J, t, d)``. ``flags[0]`` is set when the bound ``ub`` cut something;
    ``flags[1:4]`` count pairs, stage curves and candidate points.
    """
    nI, n = member.shape
    nT = tvals.shape[0]
    n_opts = p.shape[0]
    stamp = np.full(nI, -1, np.int64)
    queue = np.zeros(nI, np.int64)
    sm = np.zeros(n, np.uint8)
    lay = np.zeros(n, np.int64)
    it_ptr = np.zeros(n + 1, np.int64)
    no = max(n_opts, 1)
    it_opt = np.zeros(no, np.int64)
    it_e, it_cost, it_A, it_B = np.zeros(no), np.zeros(no), np.zeros(no), np.zeros(no)
    fast, choice, gpick = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    mem = np.zeros(no)
    curve = np.zeros(Smax + 2)
    cut = np.zeros(Smax + 2)
    front = np.zeros(Smax + 1)
    ccap = 4096
    ck = np.zeros(ccap, np.int64)
    cs = np.zeros(ccap, np.int64)
    cv = np.zeros(ccap)
    co = np.zeros((ccap, 3), np.int64)
    tmp = np.zeros(ccap, np.int64)
    order = np.zeros(ccap, np.int64)
    cnt_s = np.zeros(Smax + 2, np.int64)
    cnt_k = np.zeros(K + 2, np.int64)
    P = np.full((K + 1, Smax + 1) if dense else (1, 1), INF)
    PO = np.zeros((K + 1, Smax + 1, 3) if dense else (1, 1, 3), np.int64)
    nslot = divs.shape[0] * (Smax + 2)
    mstamp = np.full(nslot, -1, np.int64)
    mst = np.zeros(nslot, np.int64)
    mq = np.zeros(nslot)
    pt = 0
    cf, afast, bfast = 0.0, 0.0, 0.0
    pairs = 0
    I = I0
    while I < nI and pairs < budget:
        nc = 0
        head, tail = 0, 0
        for q in range(isub_ptr[I], isub_ptr[I + 1]):
            J = isub[q]
            if stamp[J] != I:
                stamp[J] = I
                queue[tail] = J
                tail += 1
        while head < tail:
            J = queue[head]
            head += 1
            pairs += 1
            n_lay = 0
            for v in range(n):
                x = member[I, v] & (1 - member[J, v])
                sm[v] = x
                if x:
                    lay[n_lay] = v
                    n_lay += 1
            # a stage that fits no device at y = 1 even with its least-memory TMPCs: neither
            # does any larger one, so the sub-ideals of J are not reached through J
            fits = False
            for ti in range(nT):
                if tvals[ti] > K:
                    continue
                s = 0.0
                for x in range(n_lay):
                    m = minmem_vt[lay[x] * nT + ti]
                    if m < 0:
                        s = INF
                        break
                    s += m
                if s <= M:
                    fits = True
                    break
            if not fits:
                continue
            for q in range(isub_ptr[J], isub_ptr[J + 1]):
                J2 = isub[q]
                if stamp[J2] != I:
                    stamp[J2] = I
                    queue[tail] = J2
                    tail += 1
            lo, hi = ptr[J], ptr[J + 1]
            if lo == hi:
                continue  # the rest J has no plan within ub on any number of devices
            kmin = pool_k[lo]  # the least device count and degree sum J's plans need
            smin = Smax
            for e in range(lo, hi):
                if pool_s[e] < smin:
                    smin = pool_s[e]
            for ti in range(nT):
                t = tvals[ti]
                dcap = min((K - kmin) // t, Smax - smin)
                if dcap < 1:
                    continue
                nd = 0
                while nd < divs.shape[0] and divs[nd] <= dcap:
                    nd += 1
                n_items = stage_items(sm, ti, nT, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c, o_in,
                                      sfw, o_out, sbw, lay, n_lay, it_ptr, it_opt, it_e, it_A, it_B, Aall, Ball)
                if n_items < 0:
                    continue
                W = 0.0
                if shared:
                    # every layer's options share their parameters: at degree d an option costs
                    # (c1 - beta) / d + beta with c1 its cost at d = 1 and beta = 4 w / (N bw), the
                    # same for all of a layer's options, so the best choice is d's for every d and
                    # the stage's time is (Q - W) / d + W with Q the least time at d = 1
                    item_costs(it_ptr[n_items], it_opt, it_e, p, w, 1, N, bw, it_cost)
                    for x in range(n_lay):
                        W += 4.0 * w_item[lay[x] * nT + ti] / N / bw
                if dense:
                    # each candidate is checked against the least value already reached at no more
                    # devices and degree sum (P), first with the stage's fastest time as its bound;
                    # the knapsack is solved only for a candidate that may still beat P, and only
                    # below P: most candidates of a memory-tight model never need one
                    pt += 1
                    for di in range(nd):
                        d = divs[di]
                        dt = d * t
                        slot = 0 if shared else di
                        base = slot * (Smax + 2)
                        if (not shared) or di == 0:
                            if not shared:
                                item_costs(it_ptr[n_items], it_opt, it_e, p, w, d, N, bw, it_cost)
                            cf = _fastest(n_items, it_ptr, it_cost, fast)
                            afast, bfast = 0.0, 0.0
                            for i in range(n_items):
                                afast += it_A[fast[i]]
                                bfast += it_B[fast[i]]
                        gfast = (cf - W) / d + W if shared else cf
                        if gfast > ub:
                            flags[0] = 1
                            continue
                        brk = -1
                        for e in range(lo, hi):
                            kk = pool_k[e]
                            if kk + dt > K:
                                break
                            if kk == brk:
                                continue
                            s = pool_s[e] + d
                            if s > Smax:
                                brk = kk
                                continue
                            k = kk + dt
                            Pks = P[k, s]
                            vf = pool_v[e]
                            if vf >= Pks:
                                continue
                            y = (s + d - 1) // d
                            if afast * y + bfast <= M:
                                g = gfast
                            else:
                                known = mstamp[base + y] == pt
                                if known and mst[base + y] == 3:
                                    brk = kk
                                    continue
                                q = cf
                                if known and mq[base + y] > q:
                                    q = mq[base + y]
                                g = (q - W) / d + W if shared else q
                                if g > ub:
                                    flags[0] = 1
                                    brk = kk
                                    continue
                                if (vf if vf > g else g) >= Pks:
                                    if vf <= g:
                                        brk = kk
                                    continue
                                if not (known and mst[base + y] == 1):
                                    lim = Pks if Pks < ub else ub
                                    thr = W + d * (lim - W) if shared else lim
                                    if not known:
                                        mstamp[base + y] = pt
                                        mst[base + y] = 0
                                    flags[2] += 1
                                    _resolve(y, thr, n_items, it_ptr, it_cost, it_A, it_B, M, greedy, fast, mem,
                                             choice, gpick, mq, mst, mstamp, pt, base, Smax, afast, bfast)
                                    if mst[base + y] == 3:
                                        brk = kk
                                        continue
                                    if mst[base + y] == 2:
                                        if Pks >= INF:
                                            flags[0] = 1
                                        brk = kk  # vf < lim <= the stage's time here
                                        continue
                                q = mq[base + y]
                                g = (q - W) / d + W if shared else q
                                if g > ub:
                                    flags[0] = 1
                                    brk = kk
                                    continue
                            x = vf if vf > g else g
                            if x < Pks:
                                nc += 1
                                k2 = k
                                while k2 <= K and P[k2, s] > x:
                                    s2 = s
                                    while s2 <= Smax and P[k2, s2] > x:
                                        P[k2, s2] = x
                                        s2 += 1
                                    k2 += 1
                                PO[k, s, 0] = J
                                PO[k, s, 1] = t
                                PO[k, s, 2] = d
                            if vf <= g:
                                brk = kk
                    continue
                if shared:
                    # the largest time per sample at d = 1 that some allowed d brings within ub
                    # (linear in d: one of the extreme degrees whose y range still holds y)
                    di = nd - 1
                    for y in range(1, Smax + 1):
                        while di > 0 and (Smax + divs[di] - 1) // divs[di] < y:
                            di -= 1
                        cut[y] = max(ub, W + divs[di] * (ub - W))
                    flags[2] += 1
                    if _curve(n_items, it_ptr, it_cost, it_A, it_B, M, Smax, curve, cut, greedy, fast, mem,
                              choice, gpick):
                        flags[0] = 1
                    if curve[1] >= INF:
                        continue
                for di in range(nd):
                    d = divs[di]
                    Yd = (Smax + d - 1) // d
                    if not shared:
                        item_costs(it_ptr[n_items], it_opt, it_e, p, w, d, N, bw, it_cost)
                        for y in range(1, Yd + 1):
                            cut[y] = ub
                        flags[2] += 1
                        if _curve(n_items, it_ptr, it_cost, it_A, it_B, M, Yd, curve, cut, greedy, fast, mem,
                                  choice, gpick):
                            flags[0] = 1
                        if curve[1] >= INF:
                            continue
                    # candidates (k + d t, s + d, max(v, stage)) from J's points; along one k
                    # the rest's time falls and the stage's grows with s, so the first point
                    # where the stage is the bottleneck ends that k (the later ones are worse)
                    dt = d * t
                    brk = -1
                    for e in range(lo, hi):
                        kk = pool_k[e]
                        if kk + dt > K:
                            break
                        if kk == brk:
                            continue
                        s = pool_s[e] + d
                        if s > Smax:
                            brk = kk
                            continue
                        q1 = curve[(s + d - 1) // d]
                        if q1 >= INF:
                            brk = kk
                            continue
                        g = (q1 - W) / d + W if shared else q1
                        if g > ub:
                            flags[0] = 1
                            brk = kk
                            continue
                        vf = pool_v[e]
                        if nc == ccap:
                            ccap *= 2
                            ck = np.concatenate((ck, np.zeros(ccap - nc, np.int64)))
                            cs = np.concatenate((cs, np.zeros(ccap - nc, np.int64)))
                            cv = np.concatenate((cv, np.zeros(ccap - nc)))
                            co2 = np.zeros((ccap, 3), np.int64)
                            co2[:nc] = co[:nc]
                            co = co2
                            tmp = np.zeros(ccap, np.int64)
                            order = np.zeros(ccap, np.int64)
                        ck[nc] = kk + dt
                        cs[nc] = s
                        cv[nc] = vf if vf > g else g
                        co[nc, 0] = J
                        co[nc, 1] = t
                        co[nc, 2] = d
                        nc += 1
                        if vf <= g:
                            brk = kk
        flags[3] += nc
        if dense:
            L = ptr[I]
            for k in range(K + 1):
                for s in range(Smax + 1):
                    v = P[k, s]
                    if v < INF and (k == 0 or P[k - 1, s] > v) and (s == 0 or P[k, s - 1] > v):
                        if L >= pool_k.shape[0]:
                            flags[1] += pairs
                            return -1 - I
                        pool_k[L] = k
                        pool_s[L] = s
                        pool_v[L] = v
                        pool_o[L, 0] = PO[k, s, 0]
                        pool_o[L, 1] = PO[k, s, 1]
                        pool_o[L, 2] = PO[k, s, 2]
                        L += 1
            for k in range(K + 1):
                for s in range(Smax + 1):
                    P[k, s] = INF
            ptr[I + 1] = L
            I += 1
            continue
        # keep the candidates no other of fewer or equal k and s beats: in order of (k, s), one
        # pass with the least value so far at each s
        L = ptr[I]
        if L + nc > pool_k.shape[0]:
            flags[1] += pairs
            return -1 - I
        # counting sort by s, then stably by k
        for x in range(Smax + 2):
            cnt_s[x] = 0
        for x in range(K + 2):
            cnt_k[x] = 0
        for c in range(nc):
            cnt_s[cs[c] + 1] += 1
            cnt_k[ck[c] + 1] += 1
        for x in range(Smax + 1):
            cnt_s[x + 1] += cnt_s[x]
        for x in range(K + 1):
            cnt_k[x + 1] += cnt_k[x]
        for c in range(nc):
            tmp[cnt_s[cs[c]]] = c
            cnt_s[cs[c]] += 1
        for r in range(nc):
            c = tmp[r]
            order[cnt_k[ck[c]]] = c
            cnt_k[ck[c]] += 1
        for s in range(Smax + 1):
            front[s] = INF
        for r in range(nc):
            c = order[r]
            s = cs[c]
            v = cv[c]
            if v < front[s]:
                if L > ptr[I] and pool_k[L - 1] == ck[c] and pool_s[L - 1] == s:
                    L -= 1  # the same k and s with a larger value: replaced
                pool_k[L] = ck[c]
                pool_s[L] = s
                pool_v[L] = v
                pool_o[L, 0] = co[c, 0]
                pool_o[L, 1] = co[c, 1]
                pool_o[L, 2] = co[c, 2]
                L += 1
                x = s
                while x <= Smax and front[x] > v:
                    front[x] = v
                    x += 1
        ptr[I + 1] = L
        I += 1
    flags[1] += pairs
    return I


@kernel(f"f8(u1[::1], i8, {_I}, {_I}, {_I}, {_I}, {_F}, {_I}, {_I}, {_F}, {_I}, {_F}, {_I}, {_F}, {_F}, {_F}, {_F}, "
        f"{_F}, i8, i8, f8, i8, f8, b1, {_I})")
def stage_pick(member, t_idx, tvals, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c, o_in, sfw, o_out,
               sbw, p, w, Aall, Ball, d, N, bw, y, M, greedy, picks):  # pragma: no cover
    """The TMPCs of the stage ``member`` (0/1 per layer) at tensor degree index ``t_idx`` and
    data-parallel degree ``d`` with ``y`` micro-batches in flight: the fastest where they fit,
    else the exact knapsack's (Piper's rule with ``greedy``). Writes each member layer's option
    (global index, in layer order) into ``picks``; returns the stage's time, INF when no choice
    fits (or some layer has no TMPC at that degree)."""
    n = member.shape[0]
    nT = tvals.shape[0]
    lay = np.zeros(n, np.int64)
    n_lay = 0
    for v in range(n):
        if member[v]:
            lay[n_lay] = v
            n_lay += 1
    no = max(p.shape[0], 1)
    it_ptr = np.zeros(n + 1, np.int64)
    it_opt = np.zeros(no, np.int64)
    it_e, it_cost, it_A, it_B = np.zeros(no), np.zeros(no), np.zeros(no), np.zeros(no)
    n_items = stage_items(member, t_idx, nT, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c, o_in, sfw,
                          o_out, sbw, lay, n_lay, it_ptr, it_opt, it_e, it_A, it_B, Aall, Ball)
    if n_items < 0:
        return INF
    n_o = it_ptr[n_items]
    item_costs(n_o, it_opt, it_e, p, w, d, N, bw, it_cost)
    mem = np.zeros(no)
    for q in range(n_o):
        mem[q] = it_A[q] * y + it_B[q]
    fast = np.zeros(max(n_items, 1), np.int64)
    cur = np.zeros(max(n_items, 1), np.int64)
    tot = _fastest(n_items, it_ptr, it_cost, fast)
    used = 0.0
    for i in range(n_items):
        used += mem[fast[i]]
        cur[i] = fast[i]
    if used > M:
        if greedy:
            tot = _piper_greedy(n_items, it_ptr, it_cost, mem, fast, M, False, cur)
        else:
            choice = np.zeros(max(n_items, 1), np.int64)
            gval = _piper_greedy(n_items, it_ptr, it_cost, mem, fast, M, True, cur)
            tot = solve_mckp(n_items, it_ptr, it_cost, mem, M, choice, INF, gval, cur)
            if tot >= INF:
                return INF
            for i in range(n_items):
                cur[i] = it_ptr[i] + choice[i]
    for i in range(n_items):
        picks[i] = it_opt[cur[i]]
    return tot
