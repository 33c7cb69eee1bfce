// Pure helpers of the Settings page: the e-mail form's body (the password is write-only: left
// empty, the saved one is kept), the webhooks' body, and where a setting comes from, in words.
import type { Schemas } from '../../api/client'

export type Delivery = Schemas['Delivery']
export type WebhookFormat = 'slack' | 'mattermost' | 'discord' | 'teams' | 'json'

export interface SmtpForm {
  host: string
  port: number | string
  security: 'starttls' | 'tls' | 'none'
  username: string
  password: string
  mail_from: string
}

export interface WebhookRow {
  name: string
  format: WebhookFormat
  /** a new URL, or '' to keep the saved one of this name */
  url: string
  /** a new signing key (json), or '' to keep the saved one */
  secret: string
  /** what the server shows of the saved URL (scheme and host) */
  hint: string
}

export function sourceText(source: string): string {
  if (source === 'settings') return 'Saved here (wins over the configuration file).'
  if (source === 'file') return 'From the configuration file.'
  return 'Not set up.'
}

export function smtpForm(settings: Delivery): SmtpForm {
  const s = settings.smtp
  return { host: s.host, port: s.port, security: s.security as SmtpForm['security'], username: s.username, password: '', mail_from: s.mail_from }
}

/** The PUT body's `smtp`; an error message when the form cannot be sent. */
export function smtpBody(form: SmtpForm): Record<string, unknown> | string {
  const port = Number(form.port)
  if (!form.host.trim()) return 'The SMTP server is needed.'
  if (!Number.isInteger(port) || port < 1 || port > 65535) return 'The port is a whole number from 1 to 65535.'
  const body: Record<string, unknown> = {
    host: form.host.trim(),
    port,
    security: form.security,
    username: form.username.trim(),
    mail_from: form.mail_from.trim(),
  }
  if (form.password) body.password = form.password
  return body
}

export function webhookRows(settings: Delivery): WebhookRow[] {
  return settings.webhooks.targets.map((t) => ({ name: t.name, format: t.format as WebhookFormat, url: '', secret: '', hint: t.url_hint }))
}

/** The PUT body's `webhooks`: a URL or key left empty keeps the saved one. */
export function webhooksBody(rows: WebhookRow[]): Record<string, unknown>[] {
  return rows.map((row) => {
    const body: Record<string, unknown> = { name: row.name.trim(), format: row.format }
    if (row.url.trim()) body.url = row.url.trim()
    if (row.secret) body.secret = row.secret
    return body
  })
}
