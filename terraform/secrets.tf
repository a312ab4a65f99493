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
