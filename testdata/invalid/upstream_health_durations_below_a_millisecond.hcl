upstream "legacy" {
  targets = ["http://10.0.0.11:9000"]
  health {
    path     = "/healthz"
    interval = "0s"
    timeout  = "-2s"
  }
}

route "r" {
  path     = "/"
  upstream = "legacy"
}
