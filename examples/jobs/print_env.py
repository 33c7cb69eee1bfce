"""Print what a Warden job task received: its argv and the distributed-training variables.

Runs anywhere (no GPU, no torch): copy it to a host and point a job at it to see what each
template gives every task. One JSON line per process, so a test (or `jq`) can read it back.
"""

import json
import os
import sys

NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TF_CONFIG",
    "CUDA_VISIBLE_DEVICES",
)


def main() -> None:
    env = {name: os.environ.get(name) for name in NAMES}
    tf_config = json.loads(env["TF_CONFIG"]) if env["TF_CONFIG"] else None
    report = {"argv": sys.argv[1:], "env": env, "tf_config": tf_config}
    print(json.dumps(report, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
