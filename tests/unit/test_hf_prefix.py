"""The hf engine's prefix store: by route key (consumed) and by content for keyless requests."""

from __future__ import annotations

import torch

from mua.engines.hf.hf_prefix import PrefixStore


def _layers(n: int, fill: float = 0.0):
    """One layer of keys/values [kv_heads=1, n, head_dim=2]: 16 bytes per token."""
    return [(torch.full((1, n, 2), fill), torch.full((1, n, 2), fill))]


def test_a_route_keys_entry_is_taken_once_and_keyless_requests_never_see_it():
    store = PrefixStore(max_bytes=10_000)
    store.put("traj", list(range(20)), _layers(20))
    assert store.take("", list(range(30))) == (0, None)  # keyed entries are not shared
    n, layers = store.take("traj", list(range(30)))
    assert n == 20 and layers is not None
    assert store.take("traj", list(range(30))) == (0, None)  # consumed
    assert len(store) == 0


def test_a_keyless_prompt_reuses_the_longest_shared_prefix_and_the_entry_stays():
    store = PrefixStore(max_bytes=10_000)
    store.put("", list(range(12)), _layers(12, 1.0))
    store.put("", list(range(16)) + [99, 98], _layers(18, 2.0))
    store.put("", [7] * 40, _layers(40, 3.0))
    prompt = list(range(25))
    n, layers = store.take("", prompt)  # the second entry shares 16 tokens, the first 12
    assert n == 16 and float(layers[0][0][0, 0, 0]) == 2.0
    assert store.take("", prompt)[0] == 16  # still there for the next request
    assert store.take("", list(range(5)) + [50] * 10)[0] == 0  # 5 shared: below min_reuse_tokens
    assert store.take("", list(range(12)))[0] == 11  # one prompt token is always left to prefill
    assert store.take("other", prompt) == (0, None)  # keyless entries never answer a route key
    assert store.hits == 3 and store.reused_tokens == 16 + 16 + 11


def test_keyless_entries_are_evicted_least_recently_used():
    store = PrefixStore(max_bytes=3 * 20 * 16)  # three 20-token entries
    for start in (0, 100, 200):
        store.put("", list(range(start, start + 20)), _layers(20))
    assert store.take("", list(range(0, 30)))[0] == 20  # touches the first entry
    store.put("", list(range(300, 320)), _layers(20))  # evicts the least recently used (100..)
    assert store.take("", list(range(100, 130))) == (0, None)
    assert store.take("", list(range(0, 30)))[0] == 20
    store.clear()
    assert len(store) == 0 and store.take("", list(range(0, 30))) == (0, None)


def test_a_keyless_prompt_gets_the_longest_prefix_of_many_entries_in_any_order():
    """Many conversations sharing a system prompt, stored in random order: every prompt reuses
    exactly the longest common prefix any entry has (checked by brute force), whichever entry
    the scan meets first."""
    import random

    rng = random.Random(0)
    system = [1] * 12
    stored = []
    store = PrefixStore(max_bytes=10**9)
    for i in range(60):
        tokens = system + [rng.randint(2, 5) for _ in range(rng.randint(0, 40))]
        stored.append(tokens)
        store.put("", tokens, _layers(len(tokens), float(i)))
    for _ in range(200):
        base = rng.choice(stored)
        cut = rng.randint(0, len(base))
        prompt = base[:cut] + [rng.randint(2, 5) for _ in range(rng.randint(1, 30))]

        def shared(tokens, prompt=prompt):
            n = 0
            while n < min(len(tokens), len(prompt) - 1) and tokens[n] == prompt[n]:
                n += 1
            return n

        want = max(shared(t) for t in stored)
        n, layers = store.take("", prompt)
        assert n == (want if want >= store.min_reuse_tokens else 0)
        if n:  # the layers are those of an entry that really shares n tokens
            assert shared(stored[int(layers[0][0][0, 0, 0])]) >= n
