"""Does a thread-block cluster's multicast cut what the resident layers pay to read an activation?

    python -P benchmarks/multicast_gpu.py [--out DIR] [--steps 96] [--rounds 3]

The resident kernel (kernels/resident_layers.py) runs each product at 1 x 128 as one program an
SM, and every program reads the whole activation ([128, 1,024] bf16, 256 KB) from L2, then all
meet at a barrier. `layer_chain_gpu.py --barriers` put that read, through pointers, plus the
barrier at 8.0 µs against 1.2 for the barrier alone on an H100. Triton 3.6 (torch 2.11's)
cannot share a load between SMs; a cluster can: each CTA loads a share of the bytes with
`cp.async.bulk ... multicast::cluster` and every CTA of the cluster receives all of them. This
probe (CuTe DSL, which the server image's FlashAttention 4 brings) times STEPS steps
in one launch, each step every CTA receiving the activation's bytes into shared memory and then
a grid barrier (an atomic counter, as the resident kernel's), for clusters of 1 (each CTA loads
everything itself), 2 and 4, and for 0, 64 and 128 KB a step (256 KB does not fit in one SM's
shared memory; the time a step is what the resident kernel's products would pay for the reads at
that size). One CTA an SM, as many as can be resident at once (a grid barrier needs all of them
running). µs a step: the median of ROUNDS rounds of LAUNCHES launches, CUDA events. Writes
OUT/multicast_gpu.json and prints a table last.
"""

import argparse
import json
import statistics
from pathlib import Path

CHUNK = 8192  # bf16 values a bulk copy moves: 16 KB
LAUNCHES = 5  # launches a round, back to back (each resets the counter first)
THREADS = 128
CLUSTERS = (1, 2, 4)
KB_A_STEP = (0, 64, 128)


def build(cluster: int, chunks: int, steps: int, ctas: int):
    """The probe kernel for one case, as a CuTe DSL jit function (compiled by the caller)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.nvgpu import cpasync
    from cutlass.memory import SmemAllocator

    @cute.kernel
    def probe(act: cute.Tensor, counter: cute.Tensor):
        tidx = cute.arch.thread_idx()[0]
        rank = cute.arch.block_idx_in_cluster()
        smem = SmemAllocator()
        bars = smem.allocate_array(cutlass.Int64, num_elems=max(chunks, 1))
        buf = smem.allocate_tensor(cutlass.BFloat16, cute.make_layout(max(chunks, 1) * CHUNK),
                                   byte_alignment=128)
        if tidx == 0:
            for c in cutlass.range_constexpr(chunks):
                cute.arch.mbarrier_init(bars + c, 1)
        cute.arch.mbarrier_init_fence()
        if cutlass.const_expr(cluster > 1):
            # Every CTA's barriers exist before a peer's multicast completes on them.
            cute.arch.cluster_arrive_relaxed()
            cute.arch.cluster_wait()
        else:
            cute.arch.sync_threads()
        src = cute.flat_divide(act, (CHUNK,))
        dst = cute.flat_divide(buf, (CHUNK,))
        if cutlass.const_expr(cluster > 1):
            atom = cute.make_copy_atom(cpasync.CopyBulkG2SMulticastOp(), cutlass.BFloat16)
        else:
            atom = cute.make_copy_atom(cpasync.CopyBulkG2SOp(), cutlass.BFloat16)
        everyone = Int32((1 << cluster) - 1)
        for step in cutlass.range(steps):
            if tidx == 0:
                for c in cutlass.range_constexpr(chunks):
                    cute.arch.mbarrier_arrive_and_expect_tx(bars + c, CHUNK * 2)
                    if c % cluster == rank:
                        if cutlass.const_expr(cluster > 1):
                            cute.copy(atom, src[None, c], dst[None, c], mbar_ptr=bars + c,
                                      mcast_mask=everyone)
                        else:
                            cute.copy(atom, src[None, c], dst[None, c], mbar_ptr=bars + c)
            for c in cutlass.range_constexpr(chunks):
                cute.arch.mbarrier_wait(bars + c, step % 2)
            cute.arch.sync_threads()
            if tidx == 0:  # the grid barrier: count in, wait for everyone's count
                cute.arch.atomic_add(counter.iterator, Int32(1), sem="release", scope="gpu")
                target = (step + 1) * ctas
                seen = cute.arch.atomic_add(counter.iterator, Int32(0), sem="acquire",
                                            scope="gpu")
                while seen < target:
                    seen = cute.arch.atomic_add(counter.iterator, Int32(0), sem="acquire",
                                                scope="gpu")
            cute.arch.sync_threads()

    @cute.jit
    def launch(act: cute.Tensor, counter: cute.Tensor, stream):
        probe(act, counter).launch(grid=[ctas, 1, 1], block=[THREADS, 1, 1],
                                   cluster=[cluster, 1, 1], stream=stream)

    return launch


def resident_ctas(cluster: int, sms: int) -> int:
    """CTAs that can all run at once, one an SM, in clusters of `cluster`."""
    if cluster == 1:
        return sms
    from cutlass.utils import HardwareInfo

    return min(sms, HardwareInfo().get_max_active_clusters(cluster) * cluster)


def measure(cluster: int, kb: int, steps: int, rounds: int, sms: int) -> dict:
    import cuda.bindings.driver as driver
    import cutlass.cute as cute
    import torch
    from cutlass.cute.runtime import from_dlpack

    chunks = kb * 1024 // (CHUNK * 2)
    ctas = resident_ctas(cluster, sms)
    act = torch.randn(max(chunks, 1) * CHUNK, device="cuda", dtype=torch.bfloat16)
    counter = torch.zeros(1, device="cuda", dtype=torch.int32)
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    args = (from_dlpack(act, assumed_align=16), from_dlpack(counter, assumed_align=4), stream)
    compiled = cute.compile(build(cluster, chunks, steps, ctas), *args)
    times = []
    for _ in range(rounds + 1):  # the first round warms up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(LAUNCHES):
            counter.zero_()
            compiled(*args)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / (LAUNCHES * steps))
        assert int(counter.item()) == steps * ctas, "the grid barrier lost a count"
    return dict(cluster=cluster, kb=kb, ctas=ctas, us_a_step=statistics.median(times[1:]),
                rounds=times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--steps", type=int, default=96, help="steps a launch (24 layers x 4)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("multicast_gpu.py needs a CUDA GPU (sm_90 or newer)")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for kb in KB_A_STEP:  # each size's clusters side by side
        for cluster in CLUSTERS:
            rows.append(measure(cluster, kb, args.steps, args.rounds, sms))
            print(f"{kb} KB, cluster {cluster}: {rows[-1]['us_a_step']:.2f} µs", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "multicast_gpu.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(0), steps=args.steps, rows=rows), indent=1))
    print(f"\n{torch.cuda.get_device_name(0)}, {args.steps} steps a launch, µs a step")
    print(f"{'KB a step':>9} {'cluster':>7} {'CTAs':>5} {'µs a step':>10}  rounds")
    for r in rows:
        print(f"{r['kb']:>9} {r['cluster']:>7} {r['ctas']:>5} {r['us_a_step']:>10.2f}  "
              + " / ".join(f"{t:.2f}" for t in r["rounds"]))


if __name__ == "__main__":
    main()
