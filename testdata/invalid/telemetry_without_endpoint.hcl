telemetry {
  service_name = "edge"
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
}
