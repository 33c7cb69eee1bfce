// The first run's set-up form (pages/SetupPage.vue): what it checks before sending. The server
// checks again and decides; this only saves a round trip for the mistakes a form can see.

/** The minimum the server takes (services/accounts/passwords.py). */
export const MIN_PASSWORD_LENGTH = 8

export interface SetupForm {
  username: string
  password: string
  repeat: string
  email: string
}

/** The token of a set-up link (`/setup?token=...`), or '' when the address has none. */
export function tokenOf(query: Record<string, unknown>): string {
  const value = query.token
  const token = Array.isArray(value) ? value[0] : value
  return typeof token === 'string' ? token.trim() : ''
}

/** Why the form cannot be sent yet, one reason per field; empty when it can. */
export function setupProblems(form: SetupForm): Record<string, string> {
  const problems: Record<string, string> = {}
  if (!form.username.trim()) problems.username = 'Choose a username (your UNIX username on the GPU hosts).'
  if (form.password.length < MIN_PASSWORD_LENGTH) {
    problems.password = `The password must be at least ${MIN_PASSWORD_LENGTH} characters.`
  } else if (form.password !== form.repeat) {
    problems.repeat = 'The two passwords differ.'
  }
  const email = form.email.trim()
  if (email && !/^[^\s@]+@[^\s@]+$/.test(email)) problems.email = 'This is not an e-mail address (name@example.org).'
  return problems
}

/** The body of POST /api/v1/setup: the e-mail left out when empty (the server's default). */
export function setupBody(form: SetupForm, token: string): { token: string; username: string; password: string; email?: string } {
  const body: { token: string; username: string; password: string; email?: string } = {
    token,
    username: form.username.trim(),
    password: form.password,
  }
  if (form.email.trim()) body.email = form.email.trim()
  return body
}
