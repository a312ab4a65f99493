# The gateway's one table, as defined in infra/schema (keys, index, TTL
# attribute) and described in functions/store/dynamo/README.md. The
# terraform tests compare this block with infra/schema.
resource "aws_dynamodb_table" "main" {
  name = var.name
  # On demand: traffic is bursty (each chat request is three writes) and
  # provisioned capacity would be a guess that throttles or overpays.
  billing_mode = "PAY_PER_REQUEST"
  hash_key     = "pk"
  range_key    = "sk"

  attribute {
    name = "pk"
    type = "S"
  }
  attribute {
    name = "sk"
    type = "S"
  }
  attribute {
    name = "gpk"
    type = "S"
  }
  attribute {
    name = "gsk"
    type = "S"
  }

  # Sparse and overloaded: queued jobs and live workers only.
  global_secondary_index {
    name            = "gsi1"
    hash_key        = "gpk"
    range_key       = "gsk"
    projection_type = "ALL"
  }

  # Rate windows, nonces, per-minute counts and connection records expire.
  ttl {
    attribute_name = "ttl"
    enabled        = true
  }

  # Balances and the ledger are money: 35 days of point-in-time recovery.
  point_in_time_recovery {
    enabled = true
  }

  # Encrypted with the AWS-managed key (no key policy to maintain; the
  # roles need no kms: permission for it).
  server_side_encryption {
    enabled = true
  }

  deletion_protection_enabled = true
}
