// Package cheat is the adversarial suite of the gateway's verification of
// work (its tests are the package): honest workers and cheaters serve one
// model side by side on a real network — the gateway stack with canaries
// on, the real workerd agent in front of each backend, a real Ollama, and
// users on the official OpenAI SDK — and the suite measures how fast each
// cheater is quarantined, what it earned, and that no honest worker is
// ever struck.
//
// Honest workers, each on its own account, all serving the same weights:
//
//	ollama    workerd's Ollama backend on a real Ollama (the operator's
//	          trusted reference worker)
//	builtin   workerd's built-in engine on the same GGUF file
//	openai    workerd's OpenAI-compatible backend on Ollama's /v1 API
//
// Cheaters, each on its own account:
//
//	canned        an OpenAI-compatible server that answers every request
//	              with the same fluent text
//	empty         an OpenAI-compatible server that answers with nothing
//	other-model   a real Ollama serving another GGUF under the model's name
//	inflate       a proxy to the real Ollama that multiplies usage by 10
//
// A worker that replays an old receipt, or signs with another key, is the
// attack suite's (infra/attack, receipts_test.go): cut off at its first
// job, with ProofStrikes on its identity.
package cheat
