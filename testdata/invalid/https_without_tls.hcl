listen {
  http  = ":8080"
  https = ":8443"
}
