#!/usr/bin/env python3
"""Writes tests/golden/tokenizer/bench_prompts.json: 8 KiB prompts of code and of Chinese text,
used by benchmarks/tokenizer_bench.cc, the HF side-by-side run and the golden test.

Code: tandem's own sources at a pinned list of files. Chinese: sentences drawn from a fixed word
list with a fixed linear congruential generator, so the file can be remade bit-identically."""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMPT_BYTES = 8192
PROMPTS_PER_KIND = 8

WORDS = ("我们 你们 他们 今天 明天 昨天 时间 问题 工作 学习 研究 发展 经济 社会 文化 历史 科学 技术 "
         "计算机 模型 语言 数据 系统 服务器 网络 程序 代码 算法 内存 显卡 推理 训练 参数 结果 方法 "
         "城市 国家 世界 人民 政府 公司 市场 产品 用户 朋友 家庭 孩子 老师 学生 医生 音乐 电影 "
         "书籍 故事 山水 河流 天气 春天 夏天 秋天 冬天 早上 晚上 中午 一起 已经 可以 需要 应该 "
         "非常 特别 重要 简单 复杂 快速 安全 稳定 开放 自由 美丽 漂亮 高兴 认为 发现 提供 支持 "
         "使用 包括 进行 实现 通过 根据 关于 因为 所以 但是 如果 虽然 而且 或者 还是 的 了 在 是 "
         "有 和 就 不 也 都 很 到 说 要 去 会 着 没有 看 好 自己 这 那 里 上 下 大 小 多 少").split()
PUNCT = "，，，、。。！？；：“”（）《》"


def lcg(seed):
    state = seed
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield state >> 33


def chinese_text(nbytes):
    rnd = lcg(20261201)
    out, size = [], 0
    while size < nbytes:
        r = next(rnd)
        if r % 23 == 0:
            piece = str(next(rnd) % 100000)
        elif r % 29 == 0:
            piece = " GPU "
        elif r % 7 == 0:
            piece = PUNCT[next(rnd) % len(PUNCT)]
        elif r % 61 == 0:
            piece = "\n"
        else:
            piece = WORDS[next(rnd) % len(WORDS)]
        out.append(piece)
        size += len(piece.encode())
    return "".join(out)


def code_text(nbytes):
    files = sorted(p for d in ("src/core", "src/kv", "src/engine", "src/model", "src/sampling")
                   for p in (ROOT / d).glob("*") if p.suffix in (".h", ".cc"))
    text = "".join(p.read_text() for p in files)
    if len(text.encode()) < nbytes:
        sys.exit("not enough source text")
    return text


def chunks(text, n):
    data, out, pos = text.encode(), [], 0
    for _ in range(n):
        end = min(pos + PROMPT_BYTES, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:
            end -= 1  # cut at a character boundary
        out.append(data[pos:end].decode())
        pos = end
    return out


def main():
    total = PROMPT_BYTES * PROMPTS_PER_KIND + 1024
    prompts = {"code": chunks(code_text(total), PROMPTS_PER_KIND),
               "chinese": chunks(chinese_text(total), PROMPTS_PER_KIND)}
    path = ROOT / "tests/golden/tokenizer/bench_prompts.json"
    path.write_text(json.dumps(prompts, ensure_ascii=False, indent=0) + "\n")
    print(path, {k: [len(p.encode()) for p in v] for k, v in prompts.items()})


if __name__ == "__main__":
    main()
