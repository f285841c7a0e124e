listen {
  http  = ":8080"
  http3 = true
}
