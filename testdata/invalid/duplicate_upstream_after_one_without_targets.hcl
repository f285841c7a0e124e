upstream "legacy" {
  balance = "round_robin"
}

upstream "legacy" {
  targets = ["http://10.0.0.11:9000"]
}

upstream "legacy" {
  targets = ["http://10.0.0.12:9000"]
}
