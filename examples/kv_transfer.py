"""A prefill rank hands a request's KV cache to a decode rank with one paged write.

Both ranks hold a paged KV cache, a tensor [pages, page_tokens, heads, head_dim] (bf16, 16
tokens x 8 heads x 64 = 16 KiB a page). Rank 0, the prefill rank, fills the pages one
request used (its page table: some pages in runs, some apart). Rank 1, the decode rank,
already serves other requests in some of its pages; it takes free pages for the new
request, registers its cache, and sends rank 0 its cache's descriptor and those page ids.
Rank 0 writes the request's pages into them with one strata_write_paged
(Communicator.write_paged), and rank 1 waits for its immediate(s) and then checks every
page: the request's pages hold what the prefill rank computed, bit for bit, and every
other page still holds what it held. Launch it with torchrun (strata bootstraps from the
variables it sets) or strata-run:

    PYTHONPATH=python python3 -m torch.distributed.run --nproc_per_node 2 \\
        --redirects 2 --tee 2 examples/kv_transfer.py

with libstrata on the loader's path or STRATA_LIBRARY_PATH naming it (build/api). Exit
status 0 when the decode rank's cache matches.
"""
import sys

import numpy as np
import torch

import strata

PAGES, PAGE_TOKENS, HEADS, HEAD_DIM = 64, 16, 8, 64
PREFILL_TABLE = [5, 6, 7, 8, 20, 33, 34, 50, 12]  # the request's pages at the prefill rank
DECODE_BUSY = [0, 1, 2, 9, 10, 11, 30]            # pages other requests hold at the decoder
IMM = 7


def page_values(seed):
    """What a page holds, from a seed: deterministic, the same on both ranks."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(PAGE_TOKENS, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)


def prefill(comm):
    cache = torch.zeros(PAGES, PAGE_TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    for i, page in enumerate(PREFILL_TABLE):  # the request's tokens, page by page
        cache[page] = page_values(1000 + i)
    with comm.register(cache) as region:
        message = comm.recv_bytes(peer=1)
        decoder = strata.Descriptor.from_bytes(message[:strata.p2p.DESC_SIZE])
        free_pages = np.frombuffer(message[strata.p2p.DESC_SIZE:], dtype=np.uint32)
        page_bytes = cache[0].numel() * cache.element_size()
        request = comm.write_paged(1, region, decoder, page_bytes, PREFILL_TABLE, free_pages,
                                   imm=IMM)
        request.wait()
        request.close()
    print(f"rank 0 (prefill): wrote the request's {len(PREFILL_TABLE)} pages "
          f"({len(PREFILL_TABLE) * page_bytes // 1024} KiB) into the decoder's pages "
          f"{free_pages.tolist()} with one write_paged")
    return True


def decode(comm):
    cache = torch.zeros(PAGES, PAGE_TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16)
    for page in DECODE_BUSY:
        cache[page] = page_values(page)  # other requests' pages
    before = cache.clone()
    free = [p for p in range(PAGES) if p not in DECODE_BUSY][:len(PREFILL_TABLE)]
    with comm.register(cache) as region:
        comm.send_bytes(0, region.descriptor.to_bytes() +
                        np.asarray(free, dtype=np.uint32).tobytes())
        comm.imm_wait(IMM, comm.list_imm_count(0), peer=0)
    wrong = [i for i, page in enumerate(free) if not torch.equal(cache[page], page_values(1000 + i))]
    others = [p for p in range(PAGES) if p not in free and not torch.equal(cache[p], before[p])]
    if wrong or others:
        print(f"rank 1 (decode): MISMATCH: the request's pages {wrong} differ, other pages "
              f"{others} changed")
        return False
    print(f"rank 1 (decode): the request's {len(free)} pages match the prefill rank's bit for "
          f"bit, in pages {free}; the other {PAGES - len(free)} pages are untouched")
    return True


def main():
    with strata.Communicator() as comm:
        if comm.size != 2:
            print("run on 2 ranks: a prefill rank and a decode rank", file=sys.stderr)
            return 2
        ok = prefill(comm) if comm.rank == 0 else decode(comm)
        comm.barrier()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
