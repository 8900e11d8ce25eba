"""python3 -m selroll.neural pretrain|train|serve|eval ... (see --help of each)."""
import sys


def main(argv):
    usage = ("usage: python3 -m selroll.neural pretrain|train|serve|eval|bench [options]\n"
             "  pretrain  behaviour cloning from the household expert (chunks that resume)\n"
             "  train     GRPO on selroll's BATCHes (PPO-clip on the exact token ids), an external trainer\n"
             "  serve     the OpenAI/vLLM-shaped server of a checkpoint\n"
             "  eval      greedy success of a checkpoint on valid_unseen tasks\n"
             "  bench     requests/s and tokens/s of a chat server at 1, 16, 48 concurrent requests\n")
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "pretrain":
        from . import train
        return train.main(rest)
    if cmd == "train":
        from . import grpo
        return grpo.main(rest)
    if cmd == "serve":
        from . import server
        return server.main(rest)
    if cmd == "eval":
        from . import evalcmd
        return evalcmd.main(rest)
    if cmd == "figure":
        from . import figure
        return figure.main(rest)
    if cmd == "bench":
        from . import bench
        return bench.main(rest)
    sys.stderr.write("python3 -m selroll.neural: unknown command %s\n" % cmd)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
