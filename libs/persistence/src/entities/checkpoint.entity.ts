import { Column, CreateDateColumn, Entity, Index, PrimaryColumn, Unique } from 'typeorm';
import { idColumn, timeColumn } from './columns';

/** A checkpoint the trainer wrote (Hugging Face layout), announced by weights.published. */
@Entity({ name: 'checkpoints' })
@Index('idx_checkpoints_version', ['version'])
@Unique('uq_checkpoints_event', ['eventId'])
export class Checkpoint {
  @PrimaryColumn({ ...idColumn, name: 'id', primaryKeyConstraintName: 'pk_checkpoints' })
  id!: string;

  @Column({ ...idColumn, name: 'event_id' })
  eventId!: string;

  @Column({ name: 'version', type: 'integer' })
  version!: number;

  @Column({ name: 'step', type: 'integer' })
  step!: number;

  /** A path or URL to config.json + safetensors. */
  @Column({ name: 'uri', type: 'text' })
  uri!: string;

  @Column({ name: 'format', type: 'varchar', length: 32 })
  format!: 'hf-safetensors';

  @Column({ name: 'sha256', type: 'varchar', length: 64 })
  sha256!: string;

  @Column({ ...timeColumn, name: 'published_at' })
  publishedAt!: Date;

  @CreateDateColumn({ ...timeColumn, name: 'recorded_at' })
  recordedAt!: Date;
}
