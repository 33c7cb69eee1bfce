// Accounts people run themselves: the address of a one-time password link, what a new-password
// form checks before sending, and where a signed-in user must go first. The server checks again
// and decides; this only saves a round trip for the mistakes a form can see.
import { MIN_PASSWORD_LENGTH } from './setup'

/** The page a one-time link opens (`/password/<token>`), at this web UI's own address. */
export function passwordLinkUrl(origin: string, token: string): string {
  return `${origin.replace(/\/+$/, '')}/password/${encodeURIComponent(token)}`
}

/** Why a new password cannot be sent yet ({password} or {repeat}); empty when it can. */
export function newPasswordProblems(password: string, repeat: string): Record<string, string> {
  if (password.length < MIN_PASSWORD_LENGTH) {
    return { password: `The password must be at least ${MIN_PASSWORD_LENGTH} characters.` }
  }
  if (password !== repeat) return { repeat: 'The two passwords differ.' }
  return {}
}

/** Whether a user must choose their own password before anything else (an admin chose it). */
export function mustChoosePassword(user: { change_at_sign_in?: boolean } | null): boolean {
  return user?.change_at_sign_in === true
}

/** Whether an account event means the signed-in user's sessions may have ended: their account
 * was deleted, or deactivated (its status changed). */
export function endsMySession(me: string | undefined, type: string, data: { username?: unknown; changed?: unknown }): boolean {
  if (!me || data.username !== me) return false
  return type === 'user.deleted' || (Array.isArray(data.changed) && data.changed.includes('status'))
}
