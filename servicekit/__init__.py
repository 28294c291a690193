"""What a trio service process needs that is neither a job bus nor a game: the command-line
program's one-line errors and clean stop on a signal (``cli``), a data directory with one owner
(``datadir``), a small ASGI app served by hypercorn on trio (``asgi``), what a person reads
instead of raw milliseconds and bytes (``humane``), and the first error of a kind out of trio's
exception groups (``groups``). ``echomq_trio`` and ``codemojex`` both use it; it imports
neither."""
