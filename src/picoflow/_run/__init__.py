"""The runner: one turn of a flow, split by phase.

``loop`` is the turn as DESIGN §3 writes it; ``ask`` builds requests and asks the model;
``dispatch`` runs tool calls; ``effects`` applies outcomes in the fixed effect order; ``workspace``
holds the turn's private copy of the session; ``observers`` is how tracing and event streams watch
a turn; ``session_turn`` opens, restores and commits the session around the loop: the one path of
a job, whose two kinds (a turn, a decision) are in ``jobs``.
"""
