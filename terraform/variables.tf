variable "region" {
  description = "AWS region to deploy to."
  type        = string

  validation {
    condition     = can(regex("^[a-z]{2}(-[a-z]+)+-[0-9]$", var.region))
    error_message = "region: an AWS region code such as eu-west-1 or us-east-1."
  }
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

  validation {
    condition     = var.lambda_dir != ""
    error_message = "lambda_dir: the folder scripts/build-lambdas writes the zips to (default ../bin/lambda/arm64)."
  }
}

variable "stage" {
  description = "Stage name of the relay's WebSocket API; part of the relay URL."
  type        = string
  default     = "prod"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,128}$", var.stage))
    error_message = "stage: 1 to 128 letters, digits, hyphens or underscores (it is part of the relay URL)."
  }
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

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days: one of the values CloudWatch Logs accepts: 1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653."
  }
}

variable "api_reserved_concurrency" {
  description = "Most API instances at once (each serves one request at a time). Caps the DynamoDB write rate the API can cause and the bill of a flood; requests beyond it get 429 from the Function URL. -1 leaves it unreserved. Reserved concurrency comes out of the account's regional limit, which must keep 100 unreserved: with the defaults (100 + 200 + the keeper's 1) the account needs a limit of at least 401 (new accounts start at 10 or 1,000; see the concurrency check in alarms.tf and the README)."
  type        = number
  default     = 100

  validation {
    condition     = var.api_reserved_concurrency == -1 || var.api_reserved_concurrency >= 1
    error_message = "api_reserved_concurrency: at least 1, or -1 for unreserved (0 would stop the API)."
  }
}

variable "relay_reserved_concurrency" {
  description = "Most relay invocations at once. Each worker message is one invocation; the cap keeps a misbehaving worker fleet from eating the account's concurrency or flooding the table. -1 leaves it unreserved."
  type        = number
  default     = 200

  validation {
    condition     = var.relay_reserved_concurrency == -1 || var.relay_reserved_concurrency >= 1
    error_message = "relay_reserved_concurrency: at least 1, or -1 for unreserved (0 would disconnect every worker)."
  }
}

variable "relay_throttle_rate" {
  description = "WebSocket API steady-state message rate limit (messages per second, whole stage)."
  type        = number
  default     = 1000

  validation {
    condition     = var.relay_throttle_rate > 0
    error_message = "relay_throttle_rate: messages per second, more than 0."
  }
}

variable "relay_throttle_burst" {
  description = "WebSocket API burst limit (messages)."
  type        = number
  default     = 2000

  validation {
    condition     = var.relay_throttle_burst >= 1 && floor(var.relay_throttle_burst) == var.relay_throttle_burst
    error_message = "relay_throttle_burst: a whole number of messages, at least 1."
  }
}

variable "batch_window_ms" {
  description = "Workers' chunk batching window in milliseconds: each worker message is a paid relay invocation, so tokens arriving within this window travel together."
  type        = number
  default     = 50

  validation {
    condition     = var.batch_window_ms >= 0 && var.batch_window_ms <= 1000
    error_message = "batch_window_ms: 0 to 1000 milliseconds."
  }
}

variable "rate_per_minute" {
  description = "Requests per minute per API key; null keeps the code's default (60)."
  type        = number
  default     = null

  validation {
    condition     = var.rate_per_minute == null ? true : (var.rate_per_minute >= 1 && floor(var.rate_per_minute) == var.rate_per_minute)
    error_message = "rate_per_minute: a whole number of requests per minute, at least 1, or null for the code's default (60)."
  }
}

variable "account_rate_per_minute" {
  description = "Requests per minute for all of an account's API keys together (minting keys does not multiply the rate); null makes it rate_per_minute."
  type        = number
  default     = null

  validation {
    condition     = var.account_rate_per_minute == null ? true : (var.account_rate_per_minute >= 1 && floor(var.account_rate_per_minute) == var.account_rate_per_minute)
    error_message = "account_rate_per_minute: a whole number of requests per minute, at least 1, or null for rate_per_minute."
  }
}

variable "max_tokens_per_second" {
  description = "Fastest single stream, in tokens per second, a worker's hardware decodes: a reply measured faster was not generated and is rejected; null keeps the code's default (1000)."
  type        = number
  default     = null

  validation {
    condition     = var.max_tokens_per_second == null ? true : (var.max_tokens_per_second >= 1 && floor(var.max_tokens_per_second) == var.max_tokens_per_second)
    error_message = "max_tokens_per_second: a whole number, at least 1, or null for the code's default (1000)."
  }
}

variable "canary_every_seconds" {
  description = "Each model's routine canary interval, per API instance (new and quarantined workers get theirs at once); null keeps the code's default (60)."
  type        = number
  default     = null

  validation {
    condition     = var.canary_every_seconds == null ? true : (var.canary_every_seconds >= 1 && var.canary_every_seconds <= 86400 && floor(var.canary_every_seconds) == var.canary_every_seconds)
    error_message = "canary_every_seconds: whole seconds from 1 to 86400, or null for the code's default (60)."
  }
}

variable "signin_domain" {
  description = "The API's public domain users sign in to with Sign-In With Solana (the host wallets show; https:// on it is the message's URI); empty turns sign-in off."
  type        = string
  default     = ""

  validation {
    condition     = var.signin_domain == "" || can(regex("^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$", var.signin_domain))
    error_message = "signin_domain: a host name such as api.example.com (no scheme, no path), or empty."
  }
}

variable "signin_chain" {
  description = "The chain sign-in messages name: mainnet, devnet, testnet or localnet (or a solana: form)."
  type        = string
  default     = "mainnet"

  validation {
    condition     = contains(["mainnet", "devnet", "testnet", "localnet", "solana:mainnet", "solana:devnet", "solana:testnet"], var.signin_chain)
    error_message = "signin_chain: mainnet, devnet, testnet, localnet, or solana:mainnet, solana:devnet, solana:testnet."
  }
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

  validation {
    condition     = alltrue([for m in var.catalog : length(m.id) > 0 && m.price >= 1 && floor(m.price) == m.price])
    error_message = "catalog: every model needs an id and a price of whole credits, at least 1."
  }
  validation {
    condition     = length(distinct([for m in var.catalog : m.id])) == length(var.catalog)
    error_message = "catalog: model ids must be distinct."
  }
}

variable "cors_origins" {
  description = "Browser origins allowed to call the API (scheme://host[:port], or \"*\" for any); empty: CORS off."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for o in var.cors_origins : o == "*" || can(regex("^https?://[^/]+$", o))])
    error_message = "cors_origins: each is scheme://host[:port] (no path, no trailing slash), or \"*\"."
  }
}

variable "worker_share_percent" {
  description = "Share of a request's price paid to the worker, percent; null keeps the code's default (70)."
  type        = number
  default     = null

  validation {
    condition     = var.worker_share_percent == null ? true : (var.worker_share_percent >= 1 && var.worker_share_percent <= 100 && floor(var.worker_share_percent) == var.worker_share_percent)
    error_message = "worker_share_percent: a whole percent from 1 to 100, or null for the code's default (70)."
  }
}

variable "keeper_execute" {
  description = "false: the keeper's scheduled runs are dry runs that log the plan and send nothing. true: they record every transfer in the ledger (in the gateway's table) before sending it, and send. Start with false, read the plans in the keeper's logs, then switch."
  type        = bool
  default     = false
}

variable "keeper_config" {
  description = "The keeper's settings (onchain/keepercli Config, the same JSON keys). Terraform adds the key (the keeper_key secret) and the ledger (the gateway's table); the RPC URL is the rpc_url secret, never a variable. Program ids and mints are base58 public keys; pumpswap_pool is needed to execute the buyback. Optional numbers left null keep the keeper's defaults."
  type = object({
    staking_program  = string
    rewards_program  = string
    zero_mint        = string
    usdc_mint        = string
    pumpswap_pool    = optional(string)
    fee_source       = optional(string)
    slippage_bp      = optional(number)
    priority_fee_cap = optional(number)
    allowance_pool   = optional(number)
    allowance_cap_bp = optional(number)
    stake_boost_min  = optional(number)
  })

  validation {
    condition = alltrue([for v in [
      var.keeper_config.staking_program,
      var.keeper_config.rewards_program,
      var.keeper_config.zero_mint,
      var.keeper_config.usdc_mint,
      coalesce(var.keeper_config.pumpswap_pool, "11111111111111111111111111111111"),
      coalesce(var.keeper_config.fee_source, "11111111111111111111111111111111"),
    ] : can(regex("^[1-9A-HJ-NP-Za-km-z]{32,44}$", v))])
    error_message = "keeper_config: staking_program, rewards_program, zero_mint, usdc_mint (and pumpswap_pool, fee_source when set) must be base58 public keys (32 to 44 characters of 1-9, A-H, J-N, P-Z, a-k, m-z); replace every REPLACE_WITH_* of the example."
  }
  validation {
    condition     = var.keeper_config.slippage_bp == null ? true : (var.keeper_config.slippage_bp >= 0 && var.keeper_config.slippage_bp <= 5000)
    error_message = "keeper_config.slippage_bp: 0 to 5000 basis points, or null for the keeper's default (100)."
  }
  validation {
    condition     = var.keeper_config.allowance_cap_bp == null ? true : (var.keeper_config.allowance_cap_bp >= 0 && var.keeper_config.allowance_cap_bp <= 10000)
    error_message = "keeper_config.allowance_cap_bp: 0 to 10000 basis points, or null for the keeper's default (2500)."
  }
  validation {
    condition = alltrue([for v in [var.keeper_config.priority_fee_cap, var.keeper_config.allowance_pool] :
    v == null ? true : v >= 0 && floor(v) == v])
    error_message = "keeper_config: priority_fee_cap and allowance_pool are whole numbers, at least 0, or null for the keeper's defaults."
  }
  validation {
    condition     = var.keeper_config.stake_boost_min == null ? true : var.keeper_config.stake_boost_min >= 1 && floor(var.keeper_config.stake_boost_min) == var.keeper_config.stake_boost_min
    error_message = "keeper_config: stake_boost_min is whole ZERO base units, at least 1, or null for the keeper's default (500,000 ZERO)."
  }
}

variable "treasury" {
  description = "The treasury wallet's public key (base58), which receives USDC deposits (the keeper's key's wallet); empty turns the deposit routes off. The API takes usdc_mint from keeper_config and the RPC URL from the rpc_url secret."
  type        = string
  default     = ""

  validation {
    condition     = var.treasury == "" || can(regex("^[1-9A-HJ-NP-Za-km-z]{32,44}$", var.treasury))
    error_message = "treasury: the keeper wallet's base58 public key, or empty."
  }
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
  description = "An SNS topic of your own for the alarms; empty (the default) creates one, <name>-alarms, whose subscriptions are yours to add (output alarm_topic_arn)."
  type        = string
  default     = ""

  validation {
    condition     = var.alarm_topic_arn == "" || can(regex("^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_-]+$", var.alarm_topic_arn))
    error_message = "alarm_topic_arn: an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME), or empty to create one."
  }
}

variable "queue_age_alarm_seconds" {
  description = "Alarm when a job waited this long for a worker (the QueueWait metric's maximum over 5 minutes): a stuck queue, or no worker for a model."
  type        = number
  default     = 60

  validation {
    condition     = var.queue_age_alarm_seconds >= 1 && var.queue_age_alarm_seconds <= 600
    error_message = "queue_age_alarm_seconds: 1 to 600 (a job gives up after the API's queue wait)."
  }
}

variable "alarm_models" {
  description = "Models that must always have an online worker: each gets a no-workers alarm. Empty: the ids of catalog (none when catalog is empty; the network-wide no-workers alarm still applies)."
  type        = list(string)
  default     = []
}

variable "server_error_percent" {
  description = "Alarm when more than this percent of the API's requests in 5 minutes end in a 5xx (at least 20 requests)."
  type        = number
  default     = 5

  validation {
    condition     = var.server_error_percent > 0 && var.server_error_percent <= 100
    error_message = "server_error_percent: more than 0, at most 100."
  }
}

variable "treasury_min_lamports" {
  description = "Alarm when the treasury's SOL balance, as the keeper reads it each run, falls below this, in lamports: about a week of its fees and new token accounts. Default 2 SOL (README, keeper: a 10,000-staker day's transactions and the rent of new recipients' token accounts)."
  type        = number
  default     = 2000000000

  validation {
    condition     = var.treasury_min_lamports >= 0 && floor(var.treasury_min_lamports) == var.treasury_min_lamports
    error_message = "treasury_min_lamports: whole lamports, at least 0."
  }
}
