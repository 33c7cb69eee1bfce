// Notification preferences as the settings page edits them, and what a `notification.sent`
// event shows (in the page and as a Web Notification). Pure.

export const CHANNELS = ['email', 'chat', 'browser'] as const
export type Channel = (typeof CHANNELS)[number]

export interface KindRow {
  kind: string
  email: boolean
  chat: boolean
  browser: boolean
}

export const KIND_LABELS: Record<string, string> = {
  reservation_starting: 'My reservation starts soon',
  reservation_ending: 'My reservation ends soon',
  reservation_idle: 'My reserved GPUs are idle',
  reservation_released: 'My reservation was released',
  reservation_cancelled: 'My reservation was cancelled by a rule change',
  reservation_violated: 'Someone is using my reserved GPU',
  using_reserved_gpu: 'I am using a GPU I may not use',
  job_finished: 'My job finished',
  job_failed: 'My job failed',
  account: 'My account: an invitation or a new password link',
  host_key_changed: 'A host presents another SSH key (admins)',
  maintenance: 'GPUs I booked are drained for maintenance',
  gpu_health: 'A GPU of my booking failed (admins: any GPU)',
}

export const CHANNEL_LABELS: Record<Channel, string> = { email: 'E-mail', chat: 'Chat', browser: 'Browser' }

export function kindLabel(kind: string): string {
  return KIND_LABELS[kind] ?? kind.replace(/_/g, ' ')
}

/** The rows whose channels differ from `saved` (what a save sends; others keep theirs). */
export function changedKinds(rows: readonly KindRow[], saved: readonly KindRow[]): KindRow[] {
  const before = new Map(saved.map((row) => [row.kind, row]))
  return rows.filter((row) => {
    const old = before.get(row.kind)
    return !old || CHANNELS.some((channel) => old[channel] !== row[channel])
  })
}

/** A lead time in minutes from a box: a whole number of 1 to 1440, else null. */
export function parseLead(text: string | number): number | null {
  const value = typeof text === 'number' ? text : Number(String(text).trim())
  return Number.isInteger(value) && value >= 1 && value <= 1440 ? value : null
}

export interface SentNotification {
  id: string
  user: string
  kind: string
  title: string
  text: string
  links?: { label: string; url: string }[]
  at: string
}

/** Only http(s) links are shown (the service checks them too; a page never opens others). */
export function safeLinks(note: SentNotification): { label: string; url: string }[] {
  return (note.links ?? []).filter((link) => /^https?:\/\//i.test(link.url))
}

/** Whether to also show a Web Notification: allowed by the user and supported. */
export function wantsSystemNotification(permission: string | undefined): boolean {
  return permission === 'granted'
}
