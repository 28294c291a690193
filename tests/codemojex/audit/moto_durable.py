"""An S3 server (moto) whose objects outlive its process, for replica outage tests.

    python -m tests.codemojex.audit.moto_durable PORT STATE

Every request is recorded in the file STATE (moto's recorder). A start with a recording replays
it into the new process, on a spare port, before it listens on PORT; so a stop and a start on
the same port is an outage, as with real storage, not an empty bucket. Prints ``ready`` once it
listens on PORT; runs until killed.
"""

from __future__ import annotations

import os
import sys
import threading


def main() -> None:
    port, state = int(sys.argv[1]), sys.argv[2]
    os.environ["MOTO_ENABLE_RECORDING"] = "1"  # read when moto is imported
    os.environ["MOTO_RECORDER_FILEPATH"] = state
    from moto.moto_api import recorder
    from moto.server import ThreadedMotoServer

    if os.path.exists(state) and os.path.getsize(state):
        spare = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
        spare.start()
        host, spare_port = spare.get_host_and_port()
        recorder.replay_recording(target_host=f"http://{host}:{spare_port}")  # not re-recorded
        spare.stop()
    ThreadedMotoServer("127.0.0.1", port, verbose=False).start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
