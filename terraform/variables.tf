variable "region" {
  description = "AWS region to deploy to."
  type        = string
}

variable "name" {
  description = "Prefix of every resource name (table, functions, APIs, roles). Lower-case letters, digits and hyphens; two deployments in one account need two names."
  type        = string
  default     = "c0mpute"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}$", var.name))
    error_message = "name: 2 to 31 lower-case letters, digits or hyphens, starting with a letter."
  }
}

variable "tags" {
  description = "Extra tags on every resource."
  type        = map(string)
  default     = {}
}

variable "lambda_dir" {
  description = "Folder holding <function>.zip as written by scripts/build-lambdas (arm64), relative to this folder."
  type        = string
  default     = "../bin/lambda/arm64"
}

variable "stage" {
  description = "Stage name of the relay's WebSocket API; part of the relay URL."
  type        = string
  default     = "prod"
}

variable "log_level" {
  description = "Log level of the functions: debug, info, warn or error."
  type        = string
  default     = "info"

  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log_level)
    error_message = "log_level: debug, info, warn or error."
  }
}

variable "log_retention_days" {
  description = "How long CloudWatch keeps the functions' logs, in days (a value CloudWatch accepts: 1, 3, 5, 7, 14, 30, 60, 90, …)."
  type        = number
  default     = 30
}

variable "api_reserved_concurrency" {
  description = "Most API instances at once (each serves one request at a time). Caps the DynamoDB write rate the API can cause and the bill of a flood; requests beyond it get 429 from the Function URL. -1 leaves it unreserved."
  type        = number
  default     = 100
}

variable "relay_reserved_concurrency" {
  description = "Most relay invocations at once. Each worker message is one invocation; the cap keeps a misbehaving worker fleet from eating the account's concurrency or flooding the table. -1 leaves it unreserved."
  type        = number
  default     = 200
}

variable "relay_throttle_rate" {
  description = "WebSocket API steady-state message rate limit (messages per second, whole stage)."
  type        = number
  default     = 1000
}

variable "relay_throttle_burst" {
  description = "WebSocket API burst limit (messages)."
  type        = number
  default     = 2000
}

variable "batch_window_ms" {
  description = "Workers' chunk batching window in milliseconds: each worker message is a paid relay invocation, so tokens arriving within this window travel together."
  type        = number
  default     = 50
}

variable "rate_per_minute" {
  description = "Requests per minute per API key; 0 keeps the code's default."
  type        = number
  default     = 0
}

variable "account_rate_per_minute" {
  description = "Requests per minute for all of an account's API keys together (minting keys does not multiply the rate); 0 makes it rate_per_minute."
  type        = number
  default     = 0
}

variable "max_tokens_per_second" {
  description = "Fastest single stream, in tokens per second, a worker's hardware decodes: a reply measured faster was not generated and is rejected; 0 keeps the code's default (1000)."
  type        = number
  default     = 0
}

variable "canary_every_seconds" {
  description = "Each model's routine canary interval, per API instance (new and quarantined workers get theirs at once); 0 keeps the code's default (60)."
  type        = number
  default     = 0
}

variable "signin_domain" {
  description = "The API's public domain users sign in to with Sign-In With Solana (the host wallets show; https:// on it is the message's URI); empty turns sign-in off."
  type        = string
  default     = ""
}

variable "signin_chain" {
  description = "The chain sign-in messages name: mainnet, devnet, testnet or localnet (or a solana: form)."
  type        = string
  default     = "mainnet"
}

variable "catalog" {
  description = "The models on offer: a list of {id, price (credits per request), aliases?, owned_by?, note?, known_answers?}; empty keeps the code's default line-up. The API and relay functions both read it."
  type = list(object({
    id            = string
    price         = number
    aliases       = optional(list(string))
    owned_by      = optional(string)
    note          = optional(string)
    known_answers = optional(bool)
  }))
  default = []
}

variable "cors_origins" {
  description = "Browser origins allowed to call the API (scheme://host[:port], or \"*\" for any); empty: CORS off."
  type        = list(string)
  default     = []
}

variable "worker_share_percent" {
  description = "Share of a request's price paid to the worker, percent; 0 keeps the code's default."
  type        = number
  default     = 0
}

variable "keeper_execute" {
  description = "false: the keeper's scheduled runs are dry runs that log the plan and send nothing. true: they record every transfer in the ledger (in the gateway's table) before sending it, and send. Start with false, read the plans in the keeper's logs, then switch."
  type        = bool
  default     = false
}

variable "keeper_config" {
  description = "The keeper's settings (onchain/keepercli Config); Terraform adds the key (the keeper_key secret); the ledger is the gateway's table. Program ids and mints are base58 public keys; pumpswap_pool is needed to execute the buyback."
  type = object({
    rpc_url          = string
    staking_program  = string
    rewards_program  = string
    zero_mint        = string
    usdc_mint        = string
    pumpswap_pool    = optional(string)
    slippage_bp      = optional(number)
    priority_fee_cap = optional(number)
    allowance_pool   = optional(number)
    allowance_cap_bp = optional(number)
    stake_boost_min  = optional(number)
  })
}

variable "treasury" {
  description = "The treasury wallet's public key (base58), which receives USDC deposits (the keeper's key's wallet); empty turns the deposit routes off. The API takes rpc_url and usdc_mint from keeper_config."
  type        = string
  default     = ""
}

variable "x402_network" {
  description = "Turns x402 top-ups (POST /v1/x402/top-up) on, on this cluster: mainnet, devnet or testnet; empty: off. They pay into treasury (which must be set) and their fees come from the keypair in the x402_fee_payer secret (put it in first)."
  type        = string
  default     = ""
  validation {
    condition     = contains(["", "mainnet", "devnet", "testnet"], var.x402_network)
    error_message = "x402_network is mainnet, devnet, testnet or empty."
  }
}

variable "alarm_topic_arn" {
  description = "SNS topic the alarms notify; empty: alarms only change state (visible in the console)."
  type        = string
  default     = ""
}

variable "queue_age_alarm_seconds" {
  description = "Alarm when the oldest queued job has waited this long (stuck queue: no worker for a model)."
  type        = number
  default     = 60
}
