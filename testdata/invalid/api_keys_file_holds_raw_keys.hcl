subject {
  api_keys_file = "api-keys-raw.txt"
}
