// The live stream's events seen lately, by their own id (`event_id`): resuming on another
// gateway replica sends some events again (those of the few seconds before the last one seen),
// and each is handled once. Bounded: the oldest ids are forgotten first.
export class SeenEvents {
  private readonly ids = new Set<string>()

  constructor(private readonly capacity = 5000) {}

  /** True the first time `eventId` is offered (an empty id is never a duplicate). */
  first(eventId: string | undefined): boolean {
    if (!eventId) return true
    if (this.ids.has(eventId)) return false
    this.ids.add(eventId)
    if (this.ids.size > this.capacity) {
      const oldest = this.ids.values().next().value
      if (oldest !== undefined) this.ids.delete(oldest)
    }
    return true
  }
}
