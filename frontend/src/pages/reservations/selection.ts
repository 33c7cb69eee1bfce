// Which GPUs the calendar shows: the ones in the link, else the person's own choice (kept in
// localStorage per user, as the dashboard keeps its charts), else every GPU they may book.
// No Vue here.

/** How far ahead "may book" looks: a rule's weekly windows or a start date show within it. */
export const BOOKABLE_LOOKAHEAD_DAYS = 28

export function selectionKey(username: string | undefined | null): string {
  return `warden.calendar.${username ?? 'anonymous'}`
}

/** The GPUs this person chose last time (uuids), or null when they never chose. */
export function loadSelection(storage: Pick<Storage, 'getItem'>, username: string | undefined | null): string[] | null {
  let raw: unknown
  try {
    raw = JSON.parse(storage.getItem(selectionKey(username)) ?? 'null')
  } catch {
    return null
  }
  if (!Array.isArray(raw)) return null
  return [...new Set(raw.filter((id): id is string => typeof id === 'string' && id !== ''))]
}

export function saveSelection(storage: Pick<Storage, 'setItem'>, username: string | undefined | null, ids: string[]): void {
  try {
    storage.setItem(selectionKey(username), JSON.stringify(ids))
  } catch {
    // storage full or forbidden: the choice lasts this visit only
  }
}

/**
 * The GPUs this person may book, from the access-rule overview (`GET /reservations/overview`:
 * per GPU, runs of free / mine / taken / not_allowed): those with a slot free for them, or
 * booked by them. (`taken` says someone else holds it, not whether they could.) In `gpus`'
 * order.
 */
export function bookableIds(
  gpus: readonly { uuid: string }[],
  overview: readonly { uuid: string; runs: readonly { state: string }[] }[],
): string[] {
  const yours = (state: string) => state === 'free' || state === 'mine'
  const allowed = new Set(overview.filter((g) => g.runs.some((r) => yours(r.state))).map((g) => g.uuid))
  return gpus.filter((g) => allowed.has(g.uuid)).map((g) => g.uuid)
}

/**
 * What the calendar shows: the link's GPUs (a shared link shows what it names; `?gpus=` with
 * none is an emptied choice); else the remembered choice, less GPUs that are gone (an emptied
 * one stays empty: the page asks to choose); else every GPU this person may book; else (they
 * may book none) every GPU, so that the page shows who holds them. `asked` is null when the
 * link names no `gpus`; `bookable` is null while it is being found out: then nothing yet,
 * rather than a list that changes under the person.
 */
export function chooseSelection(options: {
  asked: readonly string[] | null
  remembered: readonly string[] | null
  known: readonly { uuid: string }[]
  bookable: readonly string[] | null
}): string[] | null {
  const { asked, remembered, known, bookable } = options
  if (asked !== null) return [...asked]
  if (remembered !== null) {
    if (!remembered.length) return []
    const kept = new Set(remembered)
    const still = known.filter((g) => kept.has(g.uuid)).map((g) => g.uuid)
    if (still.length) return still
  }
  if (bookable === null) return null
  return bookable.length ? [...bookable] : known.map((g) => g.uuid)
}
