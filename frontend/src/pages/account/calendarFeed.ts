// The calendar feed's address as the user will subscribe to it: the secret address the gateway
// made, with the GPUs to watch appended (`?gpus=host:0,host:1`). Pure.

/** The GPUs typed in a box ("node1:0, node1:1 node2:3"): each `host:index` once, in order. */
export function parseWatched(text: string): { gpus: string[]; invalid: string[] } {
  const gpus: string[] = []
  const invalid: string[] = []
  for (const part of text.split(/[\s,]+/)) {
    if (!part) continue
    if (!/^[^:\s]+:\d+$/.test(part)) invalid.push(part)
    else if (!gpus.includes(part)) gpus.push(part)
  }
  return { gpus, invalid }
}

/** The address to subscribe to: `url` with `?gpus=` when GPUs are watched. */
export function feedAddress(url: string, gpus: readonly string[]): string {
  if (!gpus.length) return url
  const list = gpus.map((gpu) => encodeURIComponent(gpu).replace(/%3A/gi, ':')).join(',')
  return `${url}${url.includes('?') ? '&' : '?'}gpus=${list}`
}

/** The same address for calendars that subscribe by `webcal:` links (Apple, Outlook desktop). */
export function webcalAddress(address: string): string {
  return address.replace(/^https?:/, 'webcal:')
}
