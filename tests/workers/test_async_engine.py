import asyncio

import pytest

from workers.async_engine import AsyncLLMEngine
from workers.config import EngineConfig, SamplingParams
from workers.engine import InvalidRequestError, LLMEngine


def test_concurrent_streams_and_cancellation(tiny_target):
    aeng = AsyncLLMEngine(LLMEngine(EngineConfig(model=str(tiny_target))))

    async def collect(n):
        toks = []
        async for o in aeng.generate([3, 4, 5], SamplingParams(max_tokens=n, temperature=0, ignore_eos=True)):
            toks += o.new_token_ids
        return toks

    async def cancel_midway():
        gen = aeng.generate([3, 4, 5], SamplingParams(max_tokens=500, temperature=0, ignore_eos=True))
        async for _ in gen:
            break
        await gen.aclose()

    async def main():
        a, b, _ = await asyncio.gather(collect(10), collect(20), cancel_midway())
        with pytest.raises(InvalidRequestError):
            async for _ in aeng.generate([], SamplingParams()):
                pass
        return a, b

    try:
        a, b = asyncio.run(main())
        assert len(a) == 10 and len(b) == 20 and b[:10] == a
        for _ in range(100):
            if not aeng.engine.has_unfinished():
                break
            asyncio.run(asyncio.sleep(0.02))
        assert aeng.engine.runner.pool.num_used == 0  # the cancelled request freed its blocks
    finally:
        aeng.shutdown()
