"""codemojex: the notification pipeline of a Telegram emoji-guessing game, on echomq_trio.

(Being built; see the README for what exists so far.)
"""
