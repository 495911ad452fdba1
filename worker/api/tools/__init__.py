"""Tool calling on /v1/chat/completions: the request's tools, how the template shows them, the grammar of a
forced call, and the calls read out of the answer (see the README's "Tool calling")."""
