"""Compiled inner loops of the planner (numba, imported only when a plan is computed).

`knapsack` is the exact per-stage choice of TMPCs for every ``y``; `fill_ideal` is one step of
the DP over pairs of ideals (`devplace_lite.multidim.planner` states the recurrence).
"""

from __future__ import annotations

import numpy as np
from numba import njit

INF = 1e300


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
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
    ccap = 256
    cm = np.empty(ccap)
    cc = np.empty(ccap)
    cp = np.empty(ccap, np.int64)
    co = np.empty(ccap, np.int64)
    for j in range(n_items):
        i = order[j]
        a, b = lvl[j], lvl[j + 1]
        k = optr[i + 1] - optr[i]
        if (b - a) * k > ccap:
            ccap = 2 * (b - a) * k
            cm = np.empty(ccap)
            cc = np.empty(ccap)
            cp = np.empty(ccap, np.int64)
            co = np.empty(ccap, np.int64)
        q = 0
        for st in range(a, b):
            for o in range(optr[i], optr[i + 1]):
                m = sm[st] + mem[o]
                c = sc[st] + cost[o]
                if m + minm_suf[j + 1] > R:
                    continue
                bound = c + minc_suf[j + 1]
                lb2 = c + h_suf[j + 1] - lam * (R - m)
                if lb2 > bound:
                    bound = lb2
                if bound > cut:
                    continue
                cm[q], cc[q], cp[q], co[q] = m, c, st, o
                q += 1
        if q == 0:
            return INF
        if q == 1:
            o1 = np.zeros(1, np.int64)
            o2 = o1
        else:
            o1 = np.argsort(cc[:q], kind="mergesort")
            o2 = np.argsort(cm[:q][o1], kind="mergesort")
        if n_st + q > cap:
            while n_st + q > cap:
                cap *= 2
            sm = np.concatenate((sm, np.zeros(cap - sm.shape[0])))
            sc = np.concatenate((sc, np.zeros(cap - sc.shape[0])))
            par = np.concatenate((par, np.zeros(cap - par.shape[0], np.int64)))
            sop = np.concatenate((sop, np.zeros(cap - sop.shape[0], np.int64)))
        best_c = INF
        for r in range(q):
            x = o1[o2[r]]
            if cc[x] < best_c:  # not dominated by a state of no more memory
                best_c = cc[x]
                sm[n_st], sc[n_st], par[n_st], sop[n_st] = cm[x], cc[x], cp[x], co[x]
                n_st += 1
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


@njit(cache=True, nogil=True)
def knapsack(n_items, optr, cost, A, B, M, Y, out, greedy, ub):
    """``out[y]`` for ``y = 1..Y``: least stage time with memory ``sum(A*y + B) <= M``.

    Exact (`solve_mckp`), solved once per distinct value: an optimum at ``y`` stays optimal for
    every larger ``y`` where it still fits, since the least time cannot fall as ``y`` grows.
    Values above ``ub`` are left INF (no plan at most ``ub`` uses them).
    ``greedy`` instead applies Piper's published rule at every ``y`` (all-fastest, then swaps in
    order of time added per byte saved until the memory fits), to compare with its program.
    """
    for y in range(Y + 1):
        out[y] = INF
    nopt = optr[n_items]
    fast = np.empty(n_items, np.int64)
    cfast = 0.0
    afast, bfast = 0.0, 0.0
    for i in range(n_items):
        f = optr[i]
        for o in range(optr[i] + 1, optr[i + 1]):
            if cost[o] < cost[f]:
                f = o
        fast[i] = f
        cfast += cost[f]
        afast += A[f]
        bfast += B[f]
    if cfast > ub:
        return 1
    cut = 0
    mem = np.empty(nopt)
    choice = np.zeros(n_items, np.int64)
    gpick = np.zeros(n_items, np.int64)
    y = 1
    while y <= Y:
        if afast * y + bfast <= M:
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
            break
        for o in range(nopt):
            mem[o] = A[o] * y + B[o]
        if greedy:
            g = _piper_greedy(n_items, optr, cost, mem, fast, M, False, gpick)
            if g <= ub:  # (the rule need not grow with y: no early stop here)
                out[y] = g
            else:
                cut = 1
            y += 1
            continue
        gval = _piper_greedy(n_items, optr, cost, mem, fast, M, True, gpick)
        val = solve_mckp(n_items, optr, cost, mem, M, choice, ub, gval, gpick)
        if val > ub:
            return 1
        sa, sb = 0.0, 0.0
        for i in range(n_items):
            o = optr[i] + choice[i]
            sa += A[o]
            sb += B[o]
        out[y] = val
        y += 1
        while y <= Y and sa * y + sb <= M and not (afast * y + bfast <= M):
            out[y] = val
            y += 1
    return cut


@njit(cache=True, nogil=True)
def _piper_greedy(n_items, optr, cost, mem, fast, M, strict, cur):
    """Piper's program's rule: from the all-fastest choice, apply the swaps in increasing order of
    (time added) / (memory saved), ties by item then option, until the memory fits (to within
    1e-9 bytes, as its program stops; with ``strict``, INF unless it fits exactly)."""
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


@njit(cache=True, nogil=True)
def stage_items(member, t_idx, nT, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c,
                o_in, sfw, o_out, sbw, n_nodes, it_ptr, it_opt, it_e):
    """Items of the stage ``member`` at tensor degree index ``t_idx``: per option its global
    index and the bytes sent over the stage's cut edges (Piper's 2 * (c + sync) per cut edge).
    Returns the item count, or -1 when some layer has no TMPC at this degree."""
    n_items = 0
    q = 0
    it_ptr[0] = 0
    for v in range(n_nodes):
        if member[v] == 0:
            continue
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
            q += 1
        n_items += 1
        it_ptr[n_items] = q
    return n_items


@njit(cache=True, nogil=True)
def item_costs(n_opts, it_opt, it_e, p, w, Aall, Ball, d, N, bw, it_cost, it_A, it_B):
    """Time per sample of each item option at data-parallel degree ``d`` (Piper's formula:
    cut-edge bytes / d plus the resync 4 (d-1) w / (d N), over the bandwidth, plus p / d)."""
    for q in range(n_opts):
        o = it_opt[q]
        comm = it_e[q] / d + 4.0 * (d - 1) * w[o] / d / N
        it_cost[q] = comm / bw + p[o] / d
        it_A[q] = Aall[o]
        it_B[q] = Ball[o]


@njit(cache=True, nogil=True)
def fill_ideal(I, member, isub_ptr, isub, stamp, queue, tvals, nT, optr_vt, in_ptr, in_src, in_c, out_ptr,
               out_dst, out_c, o_in, sfw, o_out, sbw, p, w, Aall, Ball, minmem_vt, divs, K, Smax, N, M, bw,
               greedy, val, org, row_ptr, pool_s, pool_v, pool_o, pool_n, it_ptr, it_opt, it_e, it_cost, it_A, it_B,
               tps, ub, flags):
    """Fill the DP rows of ideal ``I`` (all device counts), from its sub-ideals' rows.

    ``row_ptr[J, k]..row_ptr[J, k+1]`` in the pool are the drops of ``dp[J][k][.]`` (increasing s,
    strictly decreasing value). Returns the pool's new length, or -1 when the pool is too small.
    Sub-ideals are visited from ``I`` down by removing one layer at a time; a sub-ideal whose stage
    does not fit one device's memory even at ``y = 1`` with the least-memory TMPCs is not expanded
    (every smaller sub-ideal gives a larger stage that does not fit either).
    """
    n = member.shape[1]
    val[:, :] = INF
    head, tail = 0, 0
    for q in range(isub_ptr[I], isub_ptr[I + 1]):
        J = isub[q]
        if stamp[J] != I:
            stamp[J] = I
            queue[tail] = J
            tail += 1
    Sm = np.empty(n, np.uint8)
    while head < tail:
        J = queue[head]
        head += 1
        for v in range(n):
            Sm[v] = member[I, v] & (1 - member[J, v])
        fits = False
        for ti in range(nT):
            if tvals[ti] > K:
                continue
            s = 0.0
            ok = True
            for v in range(n):
                if Sm[v]:
                    x = minmem_vt[v * nT + ti]
                    if x < 0:
                        ok = False
                        break
                    s += x
            if ok and s <= M:
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
        if row_ptr[J, K] == row_ptr[J, K + 1]:
            continue  # the rest J has no plan within ub even on all k devices
        for ti in range(nT):
            t = tvals[ti]
            if t > K:
                continue
            n_items = stage_items(Sm, ti, nT, optr_vt, in_ptr, in_src, in_c, out_ptr, out_dst, out_c,
                                  o_in, sfw, o_out, sbw, n, it_ptr, it_opt, it_e)
            if n_items < 0:
                continue
            for di in range(divs.shape[0]):
                d = divs[di]
                if d * t > K or d > Smax:
                    break
                item_costs(it_ptr[n_items], it_opt, it_e, p, w, Aall, Ball, d, N, bw, it_cost, it_A, it_B)
                Y = (Smax + d - 1) // d
                if knapsack(n_items, it_ptr, it_cost, it_A, it_B, M, Y, tps, greedy, ub):
                    flags[0] = 1  # a stage was cut by the bound
                if tps[1] >= INF:
                    continue
                for k in range(d * t, K + 1):
                    kk = k - d * t
                    for e in range(row_ptr[J, kk], row_ptr[J, kk + 1]):
                        sf = pool_s[e]
                        s = sf + d
                        if s > Smax:
                            break
                        g = tps[(s + d - 1) // d]
                        vf = pool_v[e]
                        x = vf if vf > g else g
                        if x < val[k, s]:
                            val[k, s] = x
                            org[k, s, 0] = J
                            org[k, s, 1] = t
                            org[k, s, 2] = d
                            org[k, s, 3] = k
                            org[k, s, 4] = s
                        if vf <= g:
                            break
    # monotone in k and s ("at most k devices, sum of d at most s"), then store the drops
    for k in range(K + 1):
        for s in range(Smax + 1):
            if k > 0 and val[k - 1, s] < val[k, s]:
                val[k, s] = val[k - 1, s]
                for c in range(5):
                    org[k, s, c] = org[k - 1, s, c]
            if s > 0 and val[k, s - 1] < val[k, s]:
                val[k, s] = val[k, s - 1]
                for c in range(5):
                    org[k, s, c] = org[k, s - 1, c]
    L = pool_n
    for k in range(K + 1):
        row_ptr[I, k] = L
        prev = INF
        for s in range(Smax + 1):
            if val[k, s] < prev and val[k, s] <= ub:
                if L >= pool_s.shape[0]:
                    return -1
                pool_s[L] = s
                pool_v[L] = val[k, s]
                for c in range(5):
                    pool_o[L, c] = org[k, s, c]
                L += 1
                prev = val[k, s]
        row_ptr[I, k + 1] = L
    return L
