# The secret that API instances present to the relay when they join it as
# listeners. Generated here; the functions read it at cold start through
# C0MPUTE_LISTENER_SECRET_ARN. Its value is in the state: keep the state
# encrypted (README.md, "State").
resource "random_password" "listener" {
  length  = 64
  special = false
}

resource "aws_secretsmanager_secret" "listener" {
  name                    = "${var.name}/listener-secret"
  description             = "c0mpute: API instances authenticate to the relay with it."
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "listener" {
  secret_id     = aws_secretsmanager_secret.listener.id
  secret_string = random_password.listener.result
}

# The keeper's Solana signing key: the treasury wallet. Terraform creates
# the secret empty and never sees the key; put it in with
#   aws secretsmanager put-secret-value --secret-id <keeper_key_secret_arn> \
#     --secret-string file://keeper-key.json
resource "aws_secretsmanager_secret" "keeper_key" {
  name                    = "${var.name}/keeper-key"
  description             = "c0mpute: the keeper's Solana keypair (JSON array of 64 bytes or base58)."
  recovery_window_in_days = 30
}

# The x402 top-ups' fee payer: a hot wallet holding a little SOL (each
# top-up costs it about 10,000 lamports) and nothing else. Like the
# keeper's key, Terraform creates the secret empty; put the keypair in with
#   aws secretsmanager put-secret-value --secret-id <x402_fee_payer_secret_arn> \
#     --secret-string file://fee-payer.json
# before setting x402_network.
resource "aws_secretsmanager_secret" "x402_fee_payer" {
  name                    = "${var.name}/x402-fee-payer"
  description             = "c0mpute: the x402 top-ups' fee payer, a Solana keypair (JSON array of 64 bytes or base58)."
  recovery_window_in_days = 30
}

# The Solana JSON-RPC URL the API and the keeper call. Paid endpoints carry
# their key in the URL, so it is a secret: Terraform creates it empty and
# never sees it (not in tfvars, state or any function's environment); put
# it in with
#   aws secretsmanager put-secret-value --secret-id <rpc_url_secret_arn> \
#     --secret-string 'https://…'
# before the functions first start (README: first apply). A function that
# starts while it is empty fails its cold start saying so.
resource "aws_secretsmanager_secret" "rpc_url" {
  name                    = "${var.name}/rpc-url"
  description             = "c0mpute: the Solana JSON-RPC URL (with its API key, if any) the API and keeper call."
  recovery_window_in_days = 7
}
