telemetry {
  otlp_endpoint = "127.0.0.1:4318"
  sample_ratio  = 1.5
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
}
